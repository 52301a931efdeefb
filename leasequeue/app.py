"""App: the client side of leasequeue — connection, key prefix, job registry,
schedules, enqueue, and the operator calls (get_job, cancel, replay, purge, stats).

It never runs handlers (that is the worker's job)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar, Unpack, overload

import anyio
from redis.asyncio import Redis

from . import codec
from .errors import (
    ConfigError,
    JobCanceled,
    JobDead,
    JobNotFinished,
    JobNotFound,
    MalformedJob,
    RedisUnavailable,
    Timeout,
    UnknownJob,
)
from .limiter import Limiter, LocalLimiter
from .models import EnqueuedJob, JobRecord, JobState, NewJob, QueueStats
from .rate import Rate
from .registry import Defaults, JobDefinition, JobOptions, Registry
from .schedule_spec import ScheduleSpec
from .schedules import Schedules
from .store.connection import close_client, connect, is_memory_url
from .store.keys import (
    DEFAULT_PREFIX,
    QueueKeys,
    check_job_name,
    check_prefix,
    check_queue_name,
    schedules_keys,
)
from .store.record import decode_record, parse_logs, text
from .store.scripts import Scripts
from .store.settings import StoreSettings
from .store.shards import Shards, check_shard_count, combine, logical
from .store.translate import redis_errors

F = TypeVar("F", bound=Callable[..., Any])

MAX_PRIORITY = 32767
ENQUEUE_CHUNK = 500
MAX_DELAY = 10 * 365 * 24 * 3600.0  # ten years: beyond that it is a bug
# App.wait blocks in slices under the socket timeout (5 s), re-checking the
# job's state after each one: a missed token (a reconnect) costs one slice
WAIT_SLICE = 2.0
MAX_LIST_COUNT = 1000  # most jobs App.jobs returns per call
MAX_RERUNS = 10_000
# App.jobs: the state sets a listing can walk, by the name it is asked for
LIST_STATES = {"queued": "ready", "ready": "ready", "scheduled": "scheduled",
               "leased": "leases", "done": "done", "dead": "dead"}


@dataclass(slots=True)
class JobRequest:
    """One job for enqueue_many. ``max_attempts`` / ``max_infra_attempts`` left
    at None let the handler's definition on the worker decide; an int >= 1
    overrides it for this job."""

    name: str
    payload: dict[str, Any] | None = None
    job_id: str | None = None
    queue: str | None = None
    delay: float = 0.0
    priority: int = 0
    correlation_id: str | None = None
    request_id: str | None = None
    max_attempts: int | None = None
    max_infra_attempts: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class App:
    """Connection, prefix, registry and the producer/operator API."""

    def __init__(
        self,
        url: str = "memory://",
        *,
        prefix: str = DEFAULT_PREFIX,
        defaults: Defaults | None = None,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD,
        settings: StoreSettings | None = None,
        redis: Redis | None = None,
        limiter: Limiter | None = None,
        queue_limits: dict[str, int] | None = None,
        queue_rates: dict[str, Rate] | None = None,
        queue_shards: dict[str, int] | None = None,
        durable: bool = False,
        durable_timeout: float = 1.0,
    ) -> None:
        self.url = url
        self.prefix = check_prefix(prefix)
        self.registry = Registry(defaults or Defaults())
        self.max_payload_bytes = max_payload_bytes
        self.settings = settings or StoreSettings()
        if durable:
            self.settings = replace(self.settings, durable_replicas=max(
                1, self.settings.durable_replicas), durable_timeout_ms=int(durable_timeout * 1000))
        self.shards = Shards(self.prefix, queue_shards or {})
        self._names_ok: set[str] = set()  # job names already checked
        self._verified: set[str] = set()  # logical queues whose shard count agrees
        self.redis: Redis = redis if redis is not None else connect(url)
        self.scripts = Scripts(self.redis, url, self.settings)
        # layers 2 and 3 of the limits; in-process unless told otherwise
        self.limiter: Limiter = limiter if limiter is not None else LocalLimiter()
        self.limiter.bind(self.redis, url, self.prefix)
        self.queue_limits = {check_queue_name(q): _positive_limit(q, n)
                             for q, n in (queue_limits or {}).items()}
        #: a rate per queue (every job of the queue draws from it), counted in Redis
        self.queue_rates = {check_queue_name(q): _rate(q, r)
                            for q, r in (queue_rates or {}).items()}
        #: declared schedules, and pause / resume / trigger / list of recorded ones
        self.schedules = Schedules(self.scripts, schedules_keys(self.prefix), self.registry,
                                   self._enqueue_fire)

    # -- registry -------------------------------------------------------------

    @overload
    def job(self, fn: F) -> F: ...

    @overload
    def job(self, fn: None = None, **options: Unpack[JobOptions]) -> Callable[[F], F]: ...

    def job(self, fn: F | None = None, **options: Unpack[JobOptions]) -> Any:
        """Register a handler: ``@app.job`` or ``@app.job(queue=..., ...)``
        (the options are JobOptions; what is left out takes the Defaults)."""

        def register(func: F) -> F:
            self.registry.register(func, **options)
            return func

        if fn is not None:
            return register(fn)
        return register

    def schedule(self, name: str, job: str, *, cron: str | None = None, tz: str = "UTC",
                 every: timedelta | None = None, payload: dict[str, Any] | None = None,
                 queue: str | None = None, misfire: str = "skip", jitter: float = 0.0,
                 paused: bool = False) -> ScheduleSpec:
        """Declare a schedule: ``cron`` (evaluated in ``tz``) or ``every``
        (>= 1 s, fires on multiples of it since the epoch). Each fire enqueues
        ``job`` with ``payload`` under the id ``schedule:<name>:<fire ms>``.
        ``misfire`` "skip" drops fires missed by an outage, "once" runs one
        catch-up; ``jitter`` delays each fire's job by up to that many seconds;
        ``paused`` is the state of a new record. Checked here (ConfigError,
        nothing written); recorded in Redis at worker boot, or by
        ``await app.schedules.record()``."""
        return self.schedules.declare(name, job, cron=cron, tz=tz, every=every, payload=payload,
                                      queue=queue, misfire=misfire, jitter=jitter, paused=paused)

    async def _enqueue_fire(self, job: str, payload: dict[str, Any] | None, job_id: str,
                            queue: str, delay: float) -> EnqueuedJob:
        return await self.enqueue(job, payload, job_id=job_id, queue=queue, delay=delay)

    def keys(self, queue: str) -> QueueKeys:
        """Keys of a physical queue: a queue name, or ``queue#k`` for a shard."""
        return self.shards.keys(queue)

    def known_queues(self) -> list[str]:
        return sorted({self.registry.defaults.queue, *self.registry.queues()})

    # -- enqueue --------------------------------------------------------------

    async def enqueue(
        self,
        name: str,
        payload: dict[str, Any] | None = None,
        *,
        job_id: str | None = None,
        queue: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        correlation_id: str | None = None,
        request_id: str | None = None,
        max_attempts: int | None = None,
        max_infra_attempts: int | None = None,
    ) -> EnqueuedJob:
        """Enqueue one job. A ``job_id`` that exists already returns that job
        (``created=False``) instead of adding a second one. The job's budgets
        come from its handler's definition on the worker unless
        ``max_attempts`` / ``max_infra_attempts`` are given here."""
        request = JobRequest(name, payload, job_id, queue, delay, priority, correlation_id,
                             request_id, max_attempts, max_infra_attempts)
        logical_queue, job = self._prepare(request)
        if logical(logical_queue) not in self._verified:
            await self.verify_queues([logical_queue])
        qk = self.keys(self.shards.route(logical_queue, job.id))
        ((created, state),) = await self.scripts.enqueue(qk, [job])
        return EnqueuedJob(job.id, logical_queue, job.name, created, state)

    async def enqueue_many(self, requests: Iterable[JobRequest]) -> list[EnqueuedJob]:
        """Enqueue a batch: one script call per queue and chunk of 500 jobs.
        Every job is validated before anything is written."""
        prepared = [self._prepare(r) for r in requests]
        await self.verify_queues({queue for queue, _ in prepared})
        by_queue: dict[str, list[int]] = {}  # physical queue -> indexes
        for index, (queue, job) in enumerate(prepared):
            by_queue.setdefault(self.shards.route(queue, job.id), []).append(index)
        answers: list[EnqueuedJob | None] = [None] * len(prepared)
        for physical, indexes in by_queue.items():
            qk = self.keys(physical)
            for start in range(0, len(indexes), ENQUEUE_CHUNK):
                chunk = indexes[start:start + ENQUEUE_CHUNK]
                replies = await self.scripts.enqueue(qk, [prepared[i][1] for i in chunk])
                for i, (created, state) in zip(chunk, replies, strict=True):
                    job = prepared[i][1]
                    answers[i] = EnqueuedJob(job.id, logical(physical), job.name, created,
                                             state)
        return [a for a in answers if a is not None]

    def _prepare(self, r: JobRequest) -> tuple[str, NewJob]:
        definition = self.registry.find(r.name)
        queue = self._queue_for(r.name, r.queue, definition)
        if not (isinstance(r.priority, int) and -MAX_PRIORITY <= r.priority <= MAX_PRIORITY):
            raise ConfigError(f"priority must be an int within ±{MAX_PRIORITY}, "
                              f"got {r.priority!r}")
        if not (isinstance(r.delay, int | float) and 0 <= r.delay < MAX_DELAY):
            raise ConfigError(f"delay must be a number of seconds in [0, {MAX_DELAY}), "
                              f"got {r.delay!r}")
        # the handler's definition decides the budgets (on the worker that runs
        # it): the record holds only what the caller asked for, 0 = unset
        max_attempts = _budget("max_attempts", r.max_attempts)
        max_infra = _budget("max_infra_attempts", r.max_infra_attempts)
        job_id = r.job_id if r.job_id is not None else uuid.uuid4().hex
        if not isinstance(job_id, str) or not job_id or len(job_id) > 512:
            raise ConfigError("job_id must be a str of 1-512 characters")
        if definition is not None and (definition.rate or self.queue_rates
                                       or definition.concurrency_key is not None):
            _check_limit_keys(definition, queue, self.queue_rates, r.payload or {})
        envelope = codec.encode_envelope(r.payload, r.correlation_id or job_id,
                                         r.request_id or "", self.max_payload_bytes)
        if r.name not in self._names_ok:
            self._names_ok.add(check_job_name(r.name))
        return queue, NewJob(
            id=job_id, name=r.name, payload=envelope,
            delay_ms=int(r.delay * 1000), priority=r.priority,
            max_attempts=max_attempts, max_infra=max_infra,
        )

    def _queue_for(self, name: str, queue: str | None,
                   definition: JobDefinition | None) -> str:
        if queue is not None:
            return self.keys(queue).queue
        if definition is not None:
            return definition.queue
        if self.registry.empty:
            # a producer-only App: every job goes to the default queue
            return self.registry.defaults.queue
        raise UnknownJob(
            f"no job is registered under the name {name!r}; register it, or pass queue= "
            "to enqueue a job that another service handles"
        )

    # -- shard counts recorded in Redis ---------------------------------------

    async def verify_queues(self, queues: Iterable[str]) -> None:
        """Check this App routes each logical queue like every other process:
        the first process to use a queue records its shard count in Redis
        (``{P:Q}:config``), the others must agree. Raises ConfigError on a
        mismatch (jobs would be stranded in shards nobody reads, and job_id
        dedup would break). One script call per queue per process: enqueue
        calls it before a queue's first job, the worker at boot."""
        for queue in queues:
            name = check_queue_name(logical(queue))
            if name in self._verified:
                continue
            configured = self.shards.count(name)
            recorded = await self.scripts.queue_config(self.keys(name), configured)
            if recorded != configured:
                raise ConfigError(
                    f"queue {name!r} is recorded in Redis with {recorded} shard(s), but this "
                    f"process is configured with {configured} (App(queue_shards=...)): its "
                    f"jobs would be stranded. Configure {recorded}, or drain the queue and "
                    f"change the count with `leasequeue queues reshard {name} {configured} "
                    f"--url ... --prefix {self.prefix}` (App.reshard)."
                )
            self._verified.add(name)

    async def reshard(self, queue: str, shards: int) -> int:
        """Change the shard count recorded for a logical queue; returns the
        previous count. Refused with ConfigError, and nothing written, unless
        every physical queue of the old and the new layout is drained: no
        ready, scheduled, leased or dead job (replay or purge the dead first).
        Stop the queue's producers and workers first, then restart them with
        ``queue_shards`` set to the new count: a process that verified the old
        count keeps using it until it restarts, and processes configured with
        the old count are refused from now on (this App included). With no
        count recorded yet, this App's configured count is taken as the
        current layout.

        Finished jobs kept for their retention may stay in the old shards:
        get_job, and the job_id dedup of enqueue, are not guaranteed for them
        across a reshard."""
        name = check_queue_name(queue)
        check_shard_count(name, shards)
        recorded = await self.scripts.queue_config(self.keys(name), shards, expected=-1)
        current = recorded or self.shards.count(name)
        if current == shards:  # the layout stays: at most record it
            now = recorded or await self.scripts.queue_config(self.keys(name), shards)
            if now != shards:
                raise ConfigError(f"queue {name!r}: its shard count changed meanwhile to {now}")
            return current
        busy = await self._undrained(name, {current, shards})
        if busy:
            counts = ", ".join(f"{what} {n}" for what, n in busy.items())
            raise ConfigError(
                f"queue {name!r} is not drained ({counts} over its {current} shard(s)); "
                f"its shard count stays {current}. Let its workers finish, replay or purge "
                "its dead jobs, and stop its producers before resharding."
            )
        now = await self.scripts.queue_config(self.keys(name), shards, expected=recorded)
        if now != shards:
            raise ConfigError(f"queue {name!r}: its shard count changed meanwhile to {now}")
        self._verified.discard(name)
        return current

    async def _undrained(self, queue: str, counts: Iterable[int]) -> dict[str, int]:
        """Jobs left in any physical queue of these layouts: {what: how many}."""
        totals = {"ready": 0, "scheduled": 0, "leased": 0, "dead": 0}
        physical = {qk for n in counts for qk in self.shards.layout_keys(queue, n)}
        with redis_errors(self.url, "reshard"):
            for qk in sorted(physical, key=lambda k: k.queue):
                async with self.redis.pipeline(transaction=False) as pipe:
                    for key in (qk.ready, qk.scheduled, qk.leases, qk.dead):
                        pipe.zcard(key)
                    sizes = await pipe.execute()
                for what, n in zip(totals, sizes, strict=True):
                    totals[what] += int(n)
        return {what: n for what, n in totals.items() if n}

    # -- operator calls ------------------------------------------------------

    async def get_job(self, job_id: str, queue: str | None = None) -> JobRecord:
        """State, counters, instants, last error, payload and result of a job."""
        queues = [queue] if queue is not None else self.known_queues()
        for q in queues:
            qk = self.keys(self.shards.route(q, job_id))
            with redis_errors(self.url, "get_job"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hget(qk.jobs, job_id)
                    pipe.zscore(qk.leases, job_id)
                    pipe.hget(qk.payloads, job_id)
                    pipe.hget(qk.errors, job_id)
                    pipe.hget(qk.results, job_id)
                    pipe.hget(qk.logs, job_id)
                    raw, lease, envelope, error, result, logs = await pipe.execute()
            record = decode_record(job_id, q, raw, lease, envelope, error)
            if record is not None:
                record.result = codec.decode_result(result, job_id)
                record.logs = parse_logs(logs)
                return record
        raise JobNotFound(f"no job {job_id!r} in queue(s) {', '.join(queues)}")

    async def cancel(self, job_id: str, queue: str | None = None) -> str:
        """Cancel a job: 'canceled', 'cancel-requested' (it is running; its worker
        stops it at the next heartbeat), or 'final' (it had already ended)."""
        queues = [queue] if queue is not None else self.known_queues()
        for q in queues:
            status, _state = await self.scripts.cancel(self.keys(self.shards.route(q, job_id)),
                                                       job_id)
            if status == "malformed":
                raise MalformedJob(f"job {job_id} in queue {q}: record is malformed")
            if status != "missing":
                return status
        raise JobNotFound(f"no job {job_id!r} in queue(s) {', '.join(queues)}")

    async def replay(self, job_ids: Sequence[str] | None = None, *, queue: str | None = None,
                     limit: int = 1000) -> int:
        """Put dead jobs back in their queue with fresh counters; with no ids,
        replay up to ``limit`` of the oldest dead jobs (per shard). Returns how many."""
        q = queue or self.registry.defaults.queue
        by_shard: dict[str, list[str]] = {}
        if job_ids is None:
            for physical in self.shards.physical(q):
                raw = await self.redis.zrange(self.keys(physical).dead, 0, max(0, limit - 1))
                by_shard[physical] = [text(x) for x in raw]
        else:
            for job_id in job_ids:
                by_shard.setdefault(self.shards.route(q, job_id), []).append(job_id)
        replayed = 0
        for physical, ids in by_shard.items():
            for start in range(0, len(ids), ENQUEUE_CHUNK):
                answers = await self.scripts.replay(self.keys(physical),
                                                    ids[start:start + ENQUEUE_CHUNK])
                replayed += sum(1 for a in answers if a == 1)
        return replayed

    async def purge_dead(self, queue: str | None = None, batch: int = 500) -> int:
        """Delete every dead job of a queue, in bounded batches. Returns how many."""
        total = 0
        for physical in self.shards.physical(queue or self.registry.defaults.queue):
            qk = self.keys(physical)
            while True:
                n = await self.scripts.purge(qk, batch)
                total += n
                if n < batch:
                    break
        return total

    async def dead_letters(self, queue: str | None = None,
                           count: int = 100) -> list[dict[str, str]]:
        """The newest dead-letter entries (history: id, name, reason, error, counters)."""
        letters: list[dict[str, str]] = []
        for physical in self.shards.physical(queue or self.registry.defaults.queue):
            entries: Any = await self.redis.xrevrange(self.keys(physical).deadletters,
                                                      count=count)
            letters += [
                {"entry": text(eid), **{text(k): text(v) for k, v in fields.items()}}
                for eid, fields in entries
            ]
        # stream ids start with their ms timestamp: newest first across shards
        letters.sort(key=lambda e: tuple(int(x) for x in e["entry"].split("-")), reverse=True)
        return letters[:count]

    async def stats(self, queue: str | None = None) -> QueueStats:
        q = queue or self.registry.defaults.queue
        parts = [await self.scripts.stats(self.keys(p)) for p in self.shards.physical(q)]
        return combine(q, parts)

    async def limit_stats(self, key: str | None = None) -> list[dict[str, Any]]:
        """The state of every limit this App declares: concurrency limits
        (runs holding a slot), rate limits (starts allowed now, jobs waiting
        for a reserved start, ms until the next start). Keyed limits have a
        budget per key: pass ``key`` (e.g. "stripe:acct_1") to see one."""
        from .limit_stats import limit_stats  # runtime modules import this one

        return await limit_stats(self, key)

    # -- operator controls: pause, wait, rerun, listing ------------------------

    async def pause(self, queue: str) -> None:
        """Pause a queue (every shard of a sharded one): from the moment this
        returns no claim leases a job from it (the claim script checks the
        flag). Running jobs finish and settle as usual; enqueue still works;
        scheduled jobs still become ready. Idempotent. A queue that does not
        exist (no handler registered on this App for it and nothing in Redis)
        is a ConfigError, and nothing is written."""
        for qk in await self._existing_queue(queue, "pause"):
            with redis_errors(self.url, "pause"):
                await self.redis.set(qk.paused, b"1")

    async def resume(self, queue: str) -> None:
        """Undo pause(); idle workers are woken at once. Idempotent."""
        cap = self.settings.wake_cap
        for qk in await self._existing_queue(queue, "resume"):
            with redis_errors(self.url, "resume"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.delete(qk.paused)
                    pipe.rpush(qk.wake, b"1")
                    pipe.ltrim(qk.wake, 0, max(0, cap - 1))
                    await pipe.execute()

    async def paused(self, queue: str) -> bool:
        """Whether a queue is paused (any of its shards)."""
        name = check_queue_name(logical(queue))
        with redis_errors(self.url, "paused"):
            return bool(await self.redis.exists(*(self.keys(p).paused
                                                  for p in self.shards.physical(name))))

    async def _existing_queue(self, queue: str, what: str) -> list[QueueKeys]:
        """The keys of every shard of a queue that exists: registered on this
        App, or with keys in Redis. ConfigError (nothing written) otherwise,
        and when its recorded shard count disagrees with this App's."""
        name = check_queue_name(logical(queue))
        physical = [self.keys(p) for p in self.shards.physical(name)]
        registered = name in self.registry.queues()
        with redis_errors(self.url, what):
            recorded = await self.scripts.queue_config(self.keys(name), 1, expected=-1)
            in_redis = recorded > 0 or bool(await self.redis.exists(
                *(k for qk in physical for k in (qk.jobs, qk.stats, qk.config))))
        if not registered and not in_redis:
            raise ConfigError(
                f"cannot {what} queue {name!r}: it does not exist (no handler on this App "
                "uses it and Redis holds nothing for it); check the name and --prefix")
        if recorded and recorded != self.shards.count(name):
            raise ConfigError(
                f"queue {name!r} is recorded in Redis with {recorded} shard(s), this App is "
                f"configured with {self.shards.count(name)}: configure App(queue_shards=...)")
        return physical

    async def _locate(self, job_id: str, queue: str | None) -> tuple[str, QueueKeys]:
        """The logical queue holding a job, and the keys of its shard."""
        queues = [queue] if queue is not None else self.known_queues()
        for q in queues:
            qk = self.keys(self.shards.route(q, job_id))
            with redis_errors(self.url, "locate"):
                if await self.redis.hexists(qk.jobs, job_id):
                    return logical(q), qk
        raise JobNotFound(f"no job {job_id!r} in queue(s) {', '.join(queues)}")

    async def wait(self, job_id: str, timeout: float | None = None,  # noqa: ASYNC109
                   queue: str | None = None) -> Any:
        """Block until a job ends and return its result (None for a job that
        returned None or was skipped). Raises JobDead (carrying the dead
        reason and the last error) or JobCanceled for a job that ended
        without a result, Timeout when ``timeout`` seconds pass first (None:
        no limit), JobNotFound when no such job exists, or once its record
        is gone (its retention ran out; retention=0 keeps no record at all).

        No polling: the wait registers in the queue's waiting set and blocks
        (BLPOP) on the job's notify list, which the script that ends the job
        pushes to in the same atomic step. It works from any process, and a
        dropped connection only costs one slice (2 s): each slice re-reads the
        job's state before blocking again, so a missed token is never a
        missed ending."""
        if timeout is not None and (not isinstance(timeout, int | float) or timeout < 0):
            raise ConfigError(f"timeout must be None or seconds >= 0, got {timeout!r}")
        deadline = float("inf") if timeout is None else time.monotonic() + timeout
        q, qk = await self._locate(job_id, queue)
        blocking = not is_memory_url(self.url)  # the embedded store cannot block
        backoff = 0.05
        while True:
            remaining = deadline - time.monotonic()
            block = min(WAIT_SLICE, max(0.0, remaining))
            try:
                state = await self.scripts.watch(qk, job_id, int((block + 1.0) * 1000))
                if state == "missing":
                    raise JobNotFound(f"job {job_id!r} of queue {q} is gone (its retention ran "
                                      "out, or it kept no record)")
                if state == "malformed":
                    raise MalformedJob(f"job {job_id} in queue {q}: record is malformed")
                if JobState(state).terminal:
                    return await self._ended(job_id, q)
                if remaining <= 0:
                    raise Timeout(job_id, timeout or 0.0)
                if blocking:
                    await self._block_on(qk.notify(job_id), block)
                else:
                    await anyio.sleep(min(block, 0.005))
                backoff = 0.05
            except RedisUnavailable:
                # a reconnect: the state is re-read on the next round
                if time.monotonic() >= deadline:
                    raise
                await anyio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
                backoff = min(backoff * 2, 1.0)

    async def _block_on(self, notify: str, block: float) -> None:
        """Block on a notify list for at most ``block`` seconds; a token taken
        is put back, so every other waiter of the same job wakes too (the list
        expires by itself)."""
        with redis_errors(self.url, "wait"):
            popped = await self.redis.blpop([notify], timeout=max(block, 0.01))
            if popped:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.rpush(notify, b"1")
                    pipe.pexpire(notify, 10_000)
                    await pipe.execute()

    async def _ended(self, job_id: str, queue: str) -> Any:
        record = await self.get_job(job_id, queue)
        if record.state == JobState.DEAD:
            raise JobDead(job_id, record.state, record.reason, record.error)
        if record.state == JobState.CANCELED:
            raise JobCanceled(job_id, record.state, record.reason, record.error)
        return record.result

    async def rerun(self, job_id: str, queue: str | None = None) -> str:
        """Run a finished job (succeeded, skipped, canceled or dead) again as a
        new job ``<id>:rerun:<n>``: the same name, payload, correlation and
        request ids, priority and budgets, fresh counters, and
        ``rerun_of=<id>`` in its payload envelope (JobRecord.rerun_of). The
        original stays as it is. Returns the new job's id. JobNotFinished
        for a job still queued, scheduled or leased."""
        record = await self.get_job(job_id, queue)
        if not JobState(record.state).terminal:
            raise JobNotFinished(f"job {job_id} is {record.state}: only a finished job "
                                 "(succeeded, skipped, canceled, dead) can be re-run")
        envelope = codec.encode_envelope(record.payload, record.correlation_id,
                                         record.request_id, max(self.max_payload_bytes,
                                                                2 ** 31), rerun_of=job_id)
        await self.verify_queues([record.queue])
        for n in range(1, MAX_RERUNS + 1):
            new_id = f"{job_id}:rerun:{n}"
            if len(new_id) > 512:
                raise ConfigError(f"job id {job_id!r} is too long to re-run (ids: 512 chars)")
            job = NewJob(id=new_id, name=record.name, payload=envelope, delay_ms=0,
                         priority=record.priority, max_attempts=record.max_attempts or 0,
                         max_infra=record.max_infra_attempts or 0)
            qk = self.keys(self.shards.route(record.queue, new_id))
            ((created, _state),) = await self.scripts.enqueue(qk, [job])
            if created:
                return new_id
        raise ConfigError(f"job {job_id} was re-run {MAX_RERUNS} times already")

    async def jobs(self, queue: str, state: str, cursor: str | None = None,
                   count: int = 100, correlation_id: str | None = None,
                   ) -> tuple[list[JobRecord], str | None]:
        """One page of a queue's jobs in one state: (records, next cursor),
        the cursor None at the end. ``state``: queued (or ready), scheduled,
        leased, done (succeeded, skipped, canceled within retention) or dead.
        Order: ready = claim order; scheduled = due time; leased = lease
        expiry; done = record expiry; dead = when it died. Each call reads at
        most ``count`` (<= 1000) entries of one state set (ZRANGE by rank
        from the cursor's entry, O(log N + count)), never the keyspace. Jobs
        that change state while you page may be missed or seen twice.

        ``correlation_id`` filters the page (no index is kept: finding one
        walks the pages, O(jobs in the state) over all calls; a page may
        then hold fewer than ``count`` records, follow the cursor)."""
        if state not in LIST_STATES:
            raise ConfigError(f"state must be one of {', '.join(LIST_STATES)}, got {state!r}")
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_LIST_COUNT):
            raise ConfigError(f"count must be an int in 1..{MAX_LIST_COUNT}, got {count!r}")
        name = check_queue_name(logical(queue))
        shards = self.shards.physical(name)
        index, after = _parse_cursor(cursor, len(shards))
        qk = self.keys(shards[index])
        key = getattr(qk, LIST_STATES[state])
        with redis_errors(self.url, "jobs"):
            rows = await self._page(key, after, count)
            records = await self._records(qk, name, rows, key == qk.leases)
        if correlation_id is not None:
            records = [r for r in records if r.correlation_id == correlation_id]
        if len(rows) == count:
            last_id, last_score = rows[-1]
            return records, f"{index}:{last_score!r}:{last_id}"
        if index + 1 < len(shards):
            return records, f"{index + 1}:"
        return records, None

    async def _page(self, key: str, after: tuple[float, str] | None,
                    count: int) -> list[tuple[str, float]]:
        """Up to ``count`` (id, score) entries of a ZSET after the cursor's
        entry: by its rank while it is still there, else from the first
        entry of a higher score (or of the same score and a higher id)."""
        start, exact = 0, True
        if after is not None:
            score, member = after
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zrank(key, member)
                pipe.zscore(key, member)
                pipe.zcount(key, "-inf", f"({score!r}")
                rank, now_score, below = await pipe.execute()
            if rank is not None and now_score == score:
                start = int(rank) + 1
            else:
                start, exact = int(below), False
        raw: Any = await self.redis.zrange(key, start, start + count - 1, withscores=True)
        rows = [(text(m), float(sc)) for m, sc in raw]
        if after is not None and not exact:
            # the cursor's entry left the set: skip its equals in score up to it
            score, member = after
            rows = [(m, sc) for m, sc in rows if sc > score or (sc == score and m > member)]
        return rows

    async def _records(self, qk: QueueKeys, queue: str, rows: list[tuple[str, float]],
                       leased: bool) -> list[JobRecord]:
        if not rows:
            return []
        ids = [job_id for job_id, _ in rows]
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(qk.jobs, ids)
            pipe.hmget(qk.payloads, ids)
            pipe.hmget(qk.errors, ids)
            raws, envelopes, errors = await pipe.execute()
        out = []
        for (job_id, score), raw, envelope, error in zip(rows, raws, envelopes, errors,
                                                        strict=True):
            try:
                record = decode_record(job_id, queue, raw, score if leased else None,
                                       envelope, error)
            except MalformedJob:
                continue  # get_job names it; a listing goes on
            if record is not None:
                out.append(record)
        return out

    async def ping(self) -> None:
        """Raise RedisUnavailable (naming the URL) when Redis does not answer."""
        with redis_errors(self.url, "ping"):
            await self.redis.ping()

    async def close(self) -> None:
        """Close the connections of this App and of its limiter."""
        await self.limiter.close()
        await close_client(self.redis)

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


UNSET_BUDGET = 0  # in the job record: "the worker's definition decides"


def _budget(what: str, given: int | None) -> int:
    """An explicit budget of an enqueue call, or UNSET_BUDGET."""
    if given is None:
        return UNSET_BUDGET
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ConfigError(f"{what} must be an int >= 1, got {given!r}")
    return given


def _parse_cursor(cursor: str | None, shards: int) -> tuple[int, tuple[float, str] | None]:
    """App.jobs' cursor: ``<shard>:`` (the start of a shard) or
    ``<shard>:<score>:<id>`` (after that entry)."""
    if cursor is None or cursor == "":
        return 0, None
    index, _, rest = cursor.partition(":")
    try:
        shard = int(index)
        if not 0 <= shard < shards:
            raise ValueError(index)
        if not rest:
            return shard, None
        score, sep, member = rest.partition(":")
        if not sep:
            raise ValueError(rest)
        return shard, (float(score), member)
    except ValueError:
        raise ConfigError(
            f"invalid cursor {cursor!r}: pass back the one App.jobs returned") from None


def _check_limit_keys(d: JobDefinition, queue: str, queue_rates: dict[str, Rate],
                      payload: dict[str, Any]) -> None:
    """A payload its limit keys cannot be rendered from is refused at enqueue
    (LimitKeyError naming the template, nothing written), when this App
    knows the job; a worker dead-letters it (bad-limit-key) otherwise."""
    keys = [r.limit_key for r in d.rate] + [d.concurrency_key]
    queue_rate = queue_rates.get(logical(queue))
    if queue_rate is not None:
        keys.append(queue_rate.limit_key)
    for key in keys:
        if key is not None:
            key.render(payload)


def _rate(queue: str, rate: Rate) -> Rate:
    if not isinstance(rate, Rate):
        raise ConfigError(f"queue rate of {queue!r} must be an lq.Rate, got {rate!r}")
    return rate


def _positive_limit(queue: str, limit: int) -> int:
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"queue limit of {queue!r} must be an int >= 1, got {limit!r}")
    return limit

"""App: the client side of leasequeue — connection, key prefix, job registry,
schedules, enqueue, and the operator calls (get_job, cancel, replay, purge, stats).

It never runs handlers (that is the worker's job)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, TypeVar, Unpack, overload

from redis.asyncio import Redis

from . import codec
from .errors import ConfigError, JobNotFound, MalformedJob, UnknownJob
from .limiter import Limiter, LocalLimiter
from .models import EnqueuedJob, JobRecord, NewJob, QueueStats
from .registry import Defaults, JobDefinition, JobOptions, Registry
from .schedule_spec import ScheduleSpec
from .schedules import Schedules
from .store.connection import connect
from .store.keys import (
    DEFAULT_PREFIX,
    QueueKeys,
    check_job_name,
    check_prefix,
    check_queue_name,
    schedules_keys,
)
from .store.record import decode_record, text
from .store.scripts import Scripts
from .store.settings import StoreSettings
from .store.shards import Shards, check_shard_count, combine, logical
from .store.translate import redis_errors

F = TypeVar("F", bound=Callable[..., Any])

MAX_PRIORITY = 32767
ENQUEUE_CHUNK = 500
MAX_DELAY = 10 * 365 * 24 * 3600.0  # ten years: beyond that it is a bug


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
                    raw, lease, envelope, error, result = await pipe.execute()
            record = decode_record(job_id, q, raw, lease, envelope, error)
            if record is not None:
                record.result = codec.decode_result(result, job_id)
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

    async def ping(self) -> None:
        """Raise RedisUnavailable (naming the URL) when Redis does not answer."""
        with redis_errors(self.url, "ping"):
            await self.redis.ping()

    async def close(self) -> None:
        """Close the connections of this App and of its limiter."""
        await self.limiter.close()
        await self.redis.aclose()

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


def _positive_limit(queue: str, limit: int) -> int:
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"queue limit of {queue!r} must be an int >= 1, got {limit!r}")
    return limit

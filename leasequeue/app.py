"""App: the client side of leasequeue — connection, key prefix, job registry,
schedules, enqueue, and the operator calls (get_job, cancel, replay, purge, stats).

It never runs handlers (that is the worker's job)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, TypeVar, Unpack, overload

import anyio
from redis.asyncio import Redis

from . import codec
from .audit import AuditEntry, read_audit
from .breaker import Breaker, BreakerState
from .errors import (
    ConfigError,
    JobNotFinished,
    JobNotFound,
    MalformedJob,
    RedisUnavailable,
)
from .hooks import EnqueueInfo, Hooks, HookSet
from .limiter import Limiter, LocalLimiter
from .models import EnqueuedJob, JobRecord, JobState, NewJob, QueueStats
from .producer import (
    ENQUEUE_CHUNK,
    MAX_PRIORITY,
    UNSET_BUDGET,
    WAIT_SLICE,
    EnqueueOptions,
    JobRequest,
    PlainBatch,
    Producer,
    WaitClock,
    chunks,
    decode_job,
    drawn_created,
    enqueue_options,
    not_found,
    queue_job_reads,
    result_of,
    shard_mismatch,
    unknown_queue,
    watched_ended,
)
from .rate import Rate
from .redact import redact_url
from .registry import Defaults, JobOptions, Registry
from .resources import DEFAULT_TTL, CloseFn, Ledger, ResourceKind, ResourceKinds
from .schedule_spec import ScheduleSpec
from .schedules import Schedules
from .store import listing
from .store.coalesce import EnqueueCoalescer
from .store.connection import close_client, connect, is_memory_url
from .store.keys import (
    CACHED_QUEUES,
    DEFAULT_PREFIX,
    QueueKeys,
    breaker_keys,
    check_prefix,
    check_queue_name,
    default_limiter_prefix,
    queues_key,
    schedules_keys,
)
from .store.record import decode_record, text
from .store.scripts import Scripts
from .store.settings import StoreSettings, with_durable
from .store.shards import Shards, check_shard_count, combine, logical
from .store.specs import ReplayReply
from .store.translate import redis_errors

_new = tuple.__new__

F = TypeVar("F", bound=Callable[..., Any])
H = TypeVar("H", bound=Hooks)

# re-exported: they lived here before producer.py
__all__ = ["ENQUEUE_CHUNK", "MAX_PRIORITY", "UNSET_BUDGET", "WAIT_SLICE", "App", "JobRequest"]

MAX_LIST_COUNT = 1000  # most jobs App.jobs returns per call
MAX_RERUNS = 10_000
# App.jobs: the state sets a listing can walk, by the name it is asked for
LIST_STATES = {"queued": "ready", "ready": "ready", "scheduled": "scheduled",
               "leased": "leases", "done": "done", "dead": "dead"}


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
        if not 0 < max_payload_bytes <= codec.DECODE_MAX_BYTES // 2:
            raise ConfigError(f"max_payload_bytes={max_payload_bytes!r}: use 1 to "
                              f"{codec.DECODE_MAX_BYTES // 2} (workers refuse to decode a "
                              f"stored payload over {codec.DECODE_MAX_BYTES} bytes)")
        self.max_payload_bytes = max_payload_bytes
        self.settings = with_durable(settings or StoreSettings(), durable, durable_timeout)
        self.shards = Shards(self.prefix, queue_shards or {})
        #: request checks, encoding and routing, shared with SyncApp
        self.producer = Producer(self.registry, self.shards, max_payload_bytes)
        self._verified: set[str] = set()  # logical queues whose shard count agrees
        self.redis: Redis = redis if redis is not None else connect(url)
        self.scripts = Scripts(self.redis, url, self.settings)
        #: concurrent enqueue calls of one queue share a script call (group commit)
        self.coalescer = EnqueueCoalescer(
            lambda qk, jobs, ids: self.scripts.enqueue(qk, jobs, ids), ENQUEUE_CHUNK)
        self._verifying: dict[str, anyio.Event] = {}  # first enqueues checking a queue
        # layers 2 and 3 of the limits; in-process unless told otherwise
        self.limiter: Limiter = limiter if limiter is not None else LocalLimiter()
        self.limiter.bind(self.redis, url, self.prefix)
        self.queue_limits = {check_queue_name(q): _positive_limit(q, n)
                             for q, n in (queue_limits or {}).items()}
        #: hooks around enqueue and runs (add_hook)
        self.hooks = HookSet()
        self.producer.hooks = self.hooks  # before_enqueue may add headers
        #: a rate per queue (every job of the queue draws from it), counted in Redis
        self.queue_rates = {check_queue_name(q): _rate(q, r)
                            for q, r in (queue_rates or {}).items()}
        self.producer.queue_rates = self.queue_rates  # their keys are checked at enqueue
        #: declared schedules, and pause / resume / trigger / list of recorded ones
        self.schedules = Schedules(self.scripts, schedules_keys(self.prefix), self.registry,
                                   self._enqueue_fire)
        #: circuit breakers this App knows (declared, or listed by a job), by name
        self.breakers: dict[str, Breaker] = {}
        #: resource kinds (app.resource_kind) and the resource ledger
        self.resource_kinds = ResourceKinds()
        self.ledger = Ledger(self.redis, url, self.scripts, self.prefix, self.resource_kinds,
                             self.keys)

    def __repr__(self) -> str:
        # the URL's password never leaves the process (leasequeue/redact.py)
        return f"App({redact_url(self.url)!r}, prefix={self.prefix!r})"

    # -- hooks ----------------------------------------------------------------

    def add_hook(self, hook: H) -> H:
        """Call ``hook`` (a ``leasequeue.Hooks`` subclass instance) around every
        enqueue of this App and every run of its workers; returns it. Add hooks
        before the worker starts. A hook that raises is logged and ignored."""
        self.hooks.add(hook)
        return hook

    def rebind(self, url: str) -> None:
        """Point an App that has not used Redis yet at another URL: the CLI's
        ``--url`` / ``LEASEQUEUE_URL`` win over the URL a module built it with.
        A RedisLimiter that shared this App's connection follows it."""
        old = self.redis
        self.url = url
        self.redis = connect(url)
        self.scripts = self.schedules.scripts = Scripts(self.redis, url, self.settings)
        limiter: Any = self.limiter
        if getattr(limiter, "_redis", None) is old:
            limiter._redis = limiter._scripts = None
        self.limiter.bind(self.redis, url, self.prefix)

    # -- registry -------------------------------------------------------------

    @overload
    def job(self, fn: F) -> F: ...

    @overload
    def job(self, fn: None = None, **options: Unpack[JobOptions]) -> Callable[[F], F]: ...

    def job(self, fn: F | None = None, **options: Unpack[JobOptions]) -> Any:
        """Register a handler: ``@app.job`` or ``@app.job(queue=..., ...)``
        (the options are JobOptions; what is left out takes the Defaults)."""

        def register(func: F) -> F:
            definition = self.registry.register(func, **options)
            for breaker in definition.breakers:
                self.add_breaker(breaker)
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

    # -- the resilience kit: circuit breakers and the resource ledger ----------

    @property
    def limiter_prefix(self) -> str:
        """The prefix of the shared limiter keys (breakers live there too)."""
        prefix = getattr(self.limiter, "prefix", None)
        return prefix if isinstance(prefix, str) else default_limiter_prefix(self.prefix)

    def breaker(self, name: str, **options: Any) -> Breaker:
        """Declare a circuit breaker (options: see lq.Breaker) and bind it to
        this App's Redis and limiter prefix; returns it, to attach to jobs
        (``breakers=[...]``) or use in handlers (``async with b:``)."""
        return self.add_breaker(Breaker(name, **options))

    def add_breaker(self, breaker: Breaker) -> Breaker:
        """Bind ``breaker`` to this App's Redis and limiter prefix and know it by
        name (two different breakers under one name: ConfigError); returns it."""
        known = self.breakers.get(breaker.name)
        if known is not None and known is not breaker:
            raise ConfigError(f"two different breakers are named {breaker.name!r}")
        breaker.bind(self.redis, self.url, self.limiter_prefix)
        self.breakers[breaker.name] = breaker
        return breaker

    def _breaker_named(self, name: str) -> Breaker:
        """A known breaker, or one with default settings (to read or force a
        breaker another service declared)."""
        return self.breakers.get(name) or self.add_breaker(Breaker(name))

    async def breaker_state(self, name: str) -> BreakerState:
        """One breaker's state as Redis holds it (a breaker this App does not
        declare is read with default settings)."""
        return await self._breaker_named(name).state()

    async def breaker_states(self) -> list[BreakerState]:
        """Every breaker of this limiter prefix (declared here, or recorded
        in Redis by any service), by name."""
        index = breaker_keys(self.limiter_prefix, "index").index
        with redis_errors(self.url, "breakers"):
            recorded = {text(n) for n in await self.redis.smembers(index)}
        states = []
        for name in sorted(recorded | set(self.breakers)):
            known = self.breakers.get(name)
            if known is not None:
                states.append(await known.state())
            else:  # another service's: read it without registering it here
                probe = Breaker(name)
                probe.bind(self.redis, self.url, self.limiter_prefix)
                states.append(await probe.state())
        return states

    async def force_breaker(self, name: str, mode: str, who: str = "operator") -> bool:
        """Force a breaker ``open`` (until forced closed) or ``closed``."""
        return await self._breaker_named(name).force(mode, who)

    def resource_kind(self, name: str, close: CloseFn, ttl: float = DEFAULT_TTL) -> ResourceKind:
        """Register a kind of external resource for ``ctx.resource``: its
        ``close(key)`` (sync or async; it may run twice and concurrently, so
        make it idempotent) and ``ttl`` seconds after which the janitor may
        close one whose run is no longer live."""
        return self.resource_kinds.register(name, close, ttl)

    async def _enqueue_fire(self, job: str, payload: dict[str, Any] | None, job_id: str,
                            queue: str, delay: float) -> EnqueuedJob:
        return await self.enqueue(job, payload, job_id=job_id, queue=queue, delay=delay)

    def keys(self, queue: str) -> QueueKeys:
        """Keys of a physical queue: a queue name, or ``queue#k`` for a shard."""
        return self.shards.keys(queue)

    def known_queues(self) -> list[str]:
        """The default queue and every queue this App's handlers use, sorted."""
        return self.producer.queues_to_search(None)

    # -- enqueue --------------------------------------------------------------

    async def enqueue(self, name: str, payload: dict[str, Any] | None = None,
                      **options: Unpack[EnqueueOptions]) -> EnqueuedJob:
        """Enqueue one job. ``options``: job_id, queue, delay, priority,
        correlation_id, request_id, max_attempts, max_infra_attempts
        (producer.EnqueueOptions). A ``job_id`` that exists already returns
        that job (``created=False``) instead of adding a second one. The
        job's budgets come from its handler's definition on the worker
        unless ``max_attempts`` / ``max_infra_attempts`` are given here."""
        if not options and not self.hooks.wants_enqueue:
            # the common call (a name and a payload; no hook): Producer.common
            # makes its job at once (with no id: the coalescer draws it as it
            # sends), its queue checked once; every other call below. With no
            # payload, its job is read here from the producer's cache of them
            # (Producer.empty_jobs: a Python call less a job, 2% of the
            # instructions of a call from 100 tasks), else common() makes it
            common = None
            if payload is None and name.__class__ is str:
                version, empties = self.producer.empty_jobs
                if version == self.registry.version:
                    common = empties.get(name)
            if common is None:
                common = self.producer.common(name, payload, True)
            if common is not None:
                logical_queue, qk, job = common
                if logical_queue not in self._verified:  # (a plain queue: never "q#k")
                    await self._verify_once(logical_queue)
                # its id drawn as it was sent: created, whatever a call sent
                # again after a lost reply answered (producer.drawn_created)
                drawn, (_, state) = await self.coalescer.enqueue(qk, job)
                return _new(EnqueuedJob, (drawn, logical_queue, name, True, state))
        values = enqueue_options(options)  # (every option, in Producer.one's order)
        infos: list[EnqueueInfo] | None = [] if self.hooks.wants_enqueue else None
        answer: EnqueuedJob | None = None
        try:
            logical_queue, qk, job = self.producer.one(name, payload, *values, infos, True)
            if (logical_queue not in self._verified  # (already logical, but for "q#k")
                    and logical(logical_queue) not in self._verified):
                await self._verify_once(logical_queue)
            # concurrent calls for one queue go as one script call (store/coalesce.py)
            # the common call's job gets its id as it is sent (Producer.one's
            # id_at_send): one os.urandom read for the coalescer's batch
            job_id, (created, state) = await self.coalescer.enqueue(qk, job)
            # tuple.__new__: the named tuple's own __new__ is a Python function around it
            answer = _new(EnqueuedJob, (job_id, logical_queue, job.name,
                                        drawn_created(created, options.get("job_id")), state))
            return answer
        finally:
            for info in infos or ():
                self.hooks.after_enqueue(info, answer)

    async def enqueue_many(self, requests: Iterable[JobRequest]) -> list[EnqueuedJob]:
        """Enqueue a batch: one script call per queue and chunk of 500 jobs.
        Every job is validated before anything is written."""
        infos: list[EnqueueInfo] | None = [] if self.hooks.wants_enqueue else None
        answers: list[EnqueuedJob | None] = []
        try:
            answers = await self._enqueue_many(requests, infos)
            return list(filter(None, answers))  # (every one is set: a C loop to retype it)
        finally:
            for i, info in enumerate(infos or ()):
                self.hooks.after_enqueue(info, answers[i] if i < len(answers) else None)

    async def _enqueue_many(self, requests: Iterable[JobRequest],
                            infos: list[EnqueueInfo] | None) -> list[EnqueuedJob | None]:
        batch = list(requests)
        plain = self.producer.plain_batch(batch, infos)
        if plain is not None:
            return await self._enqueue_plain(plain)
        prepared = self.producer.prepare_many(batch, infos)
        await self.verify_queues({queue for queue, _ in prepared})
        answers: list[EnqueuedJob | None] = [None] * len(prepared)
        for physical, indexes in self.producer.group(prepared).items():
            parts = chunks(indexes)
            batches = [[prepared[i][1] for i in part] for part in parts]

            def answer(k: int, replies: list[tuple[bool, str]], physical: str = physical,
                       parts: list[list[int]] = parts,
                       batches: list[list[NewJob]] = batches) -> None:
                self.producer.answer(answers, batches[k], physical, parts[k], replies, batch)

            # in order, pipelined on one connection where it can be (Scripts.enqueue_in_order)
            await self.scripts.enqueue_in_order(self.keys(physical), batches, answer)
        return answers

    async def _enqueue_plain(self, plain: PlainBatch) -> list[EnqueuedJob | None]:
        """A plain batch (Producer.plain_batch): its calls' jobs are made as
        each call is sent, behind Redis's work on the call before."""
        await self.verify_queues([plain.queue])
        answers: list[EnqueuedJob | None] = [None] * plain.size
        queue = plain.queue

        def answer(k: int, replies: list[tuple[bool, str]]) -> None:
            self.producer.answer(answers, plain[k], queue, plain.span(k), replies, None)
            plain.forget(k)

        await self.scripts.enqueue_in_order(self.keys(queue), plain, answer)
        return answers

    # -- shard counts recorded in Redis ---------------------------------------

    async def _verify_once(self, queue: str) -> None:
        """verify_queues for an enqueue: concurrent first enqueues of a queue
        wait for the one check in flight instead of each sending their own
        (after a failed check, each tries itself, and gets its own error)."""
        name = logical(queue)
        while (pending := self._verifying.get(name)) is not None:
            await pending.wait()
        if name in self._verified:
            return
        done = self._verifying[name] = anyio.Event()
        try:
            await self.verify_queues([queue])
        finally:
            del self._verifying[name]
            done.set()

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
                raise shard_mismatch(name, recorded, configured, self.prefix)
            with redis_errors(self.url, "verify_queues"):
                await self.redis.sadd(queues_key(self.prefix), name)
            if len(self._verified) >= CACHED_QUEUES:  # ever new queues: start again
                self._verified.clear()  # (each checked again on its next use)
            self._verified.add(name)

    async def recorded_queues(self) -> list[str]:
        """The logical queues of this prefix that a process has used (each is
        recorded by verify_queues: a producer's first enqueue, a worker's
        boot), sorted. A set of names, never a scan of the keyspace."""
        with redis_errors(self.url, "recorded_queues"):
            names = await self.redis.smembers(queues_key(self.prefix))
        return sorted(text(n) for n in names)

    async def recorded_shards(self, queue: str) -> int:
        """The shard count recorded for a logical queue (0: none recorded yet)."""
        name = check_queue_name(logical(queue))
        return await self.scripts.queue_config(self.keys(name), 1, expected=-1)

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
                    pipe.llen(qk.line)
                    pipe.hget(qk.stats, "line_stale")  # canceled jobs' entries (stats.lua)
                    *sizes, line, stale = await pipe.execute()
                sizes[0] += max(0, int(line) - int(stale or 0))
                for what, n in zip(totals, sizes, strict=True):
                    totals[what] += int(n)
        return {what: n for what, n in totals.items() if n}

    # -- operator calls ------------------------------------------------------

    async def get_job(self, job_id: str, queue: str | None = None) -> JobRecord:
        """State, counters, instants, last error, payload and result of a job."""
        queues = self.producer.queues_to_search(queue)
        for q in queues:
            qk = self.producer.keys_for(q, job_id)
            with redis_errors(self.url, "get_job"):
                async with self.redis.pipeline(transaction=False) as pipe:
                    queue_job_reads(pipe, qk, job_id)
                    replies = await pipe.execute()
            record = decode_job(job_id, q, replies)
            if record is not None:
                return record
        raise not_found(job_id, queues)

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
        replay up to ``limit`` of the oldest dead jobs (per shard). Returns how
        many (replay_each says which ids were not dead)."""
        q = queue or self.registry.defaults.queue
        if job_ids is None:
            job_ids = []
            for physical in self.shards.physical(q):
                with redis_errors(self.url, "replay"):
                    raw = await self.redis.zrange(self.keys(physical).dead, 0,
                                                  max(0, limit - 1))
                job_ids += [text(x) for x in raw]
        answers = await self.replay_each(job_ids, queue=q)
        return sum(1 for a in answers.values() if a == ReplayReply.REPLAYED)

    async def replay_each(self, job_ids: Sequence[str], *,
                          queue: str | None = None) -> dict[str, ReplayReply]:
        """Replay these dead jobs; each id's answer: REPLAYED, NOT_DEAD (not
        dead, or no such job) or MALFORMED."""
        q = queue or self.registry.defaults.queue
        by_shard: dict[str, list[str]] = {}
        for job_id in job_ids:
            by_shard.setdefault(self.shards.route(q, job_id), []).append(job_id)
        answers: dict[str, ReplayReply] = {}
        for physical, ids in by_shard.items():
            for start in range(0, len(ids), ENQUEUE_CHUNK):
                chunk = ids[start:start + ENQUEUE_CHUNK]
                replies = await self.scripts.replay(self.keys(physical), chunk)
                answers.update(zip(chunk, replies, strict=True))
        return answers

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
        """A queue's counts and counters. UnknownQueue (a ConfigError) for a
        queue nothing uses: not this App's default queue, no handler of this
        App on it, and nothing for it in Redis (a typo, or the wrong prefix)."""
        q = queue or self.registry.defaults.queue
        parts = [await self.scripts.stats(self.keys(p)) for p in self.shards.physical(q)]
        stats = combine(q, parts)
        if stats.empty and not await self.queue_exists(q):
            raise unknown_queue(q, self.prefix)
        return stats

    async def queue_exists(self, queue: str) -> bool:
        """Whether a logical queue is used: this App's default queue, a queue
        of its handlers or limits, or one with keys in Redis."""
        name = check_queue_name(logical(queue))
        if name == self.registry.defaults.queue or name in self.registry.queues() \
                or name in self.queue_limits:
            return True
        with redis_errors(self.url, "queue_exists"):
            if await self.redis.sismember(queues_key(self.prefix), name):
                return True
            return bool(await self.redis.exists(*(
                k for p in self.shards.physical(name) for k in (self.keys(p).stats,
                                                                 self.keys(p).config))))

    async def queues(self) -> list[str]:
        """Every logical queue used under this prefix (recorded in Redis by
        any process's first enqueue to it, or a worker's boot), with this
        App's own queues; sorted."""
        return sorted({*await self.recorded_queues(), *self.registry.queues()})

    async def audit(self, *, job_id: str | None = None, correlation_id: str | None = None,
                    queue: str | None = None, count: int = 100) -> list[AuditEntry]:
        """The audit trail of one job or one correlation id: the newest
        ``count`` entries (oldest first), each with what happened, why, who
        did it (``by``) and the correlation id. ``queue`` narrows the search
        (default: every queue under the prefix). It walks the capped events
        stream (no index): O(stream length) per queue at most."""
        if (job_id is None) == (correlation_id is None):
            raise ConfigError("audit takes job_id or correlation_id (one of them)")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"count must be an int >= 1, got {count!r}")
        queues = [queue] if queue is not None else await self.queues()
        if job_id is not None:  # only the shard that holds it
            keys = [self.producer.keys_for(q, job_id) for q in queues]
        else:
            keys = [self.keys(p) for q in queues for p in self.shards.physical(q)]
        return await read_audit(self.redis, self.url, keys, job_id=job_id,
                                correlation_id=correlation_id, count=count)

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
            if await self._has_record(qk, job_id, "locate"):
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
        clock = WaitClock(job_id, timeout)
        q, qk = await self._locate(job_id, queue)
        blocking = not is_memory_url(self.url)  # the embedded store cannot block
        while True:
            block = clock.block()
            try:
                state = await self.scripts.watch(qk, job_id, clock.ttl_ms(block))
                if watched_ended(state, job_id, q):
                    return result_of(await self.get_job(job_id, q))
                clock.check_expired()
                if blocking:
                    await self._block_on(qk.notify(job_id), block)
                else:
                    await anyio.sleep(min(block, 0.005))
            except RedisUnavailable:
                # a reconnect: the state is re-read on the next round
                pause = clock.pause()
                if pause is None:
                    raise
                await anyio.sleep(pause)

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
            if await self._has_record(qk, new_id):  # an earlier re-run's: the next n
                continue
            # sent once: sent again after its reply was lost, it answered
            # "existed" for the re-run its first run made, and the next n was
            # made too (the job re-run twice); that id, absent a moment ago,
            # says whether the call ran
            try:
                ((created, _state),) = await self.scripts.enqueue(qk, [job], retry=False)
            except RedisUnavailable:
                if await self._has_record(qk, new_id):
                    return new_id
                raise
            if created:
                return new_id
        raise ConfigError(f"job {job_id} was re-run {MAX_RERUNS} times already")

    async def _has_record(self, qk: QueueKeys, job_id: str, operation: str = "rerun") -> bool:
        with redis_errors(self.url, operation):
            return bool(await self.redis.hexists(qk.jobs, job_id))

    async def jobs(self, queue: str, state: str, cursor: str | None = None,
                   count: int = 100, correlation_id: str | None = None,
                   ) -> tuple[list[JobRecord], str | None]:
        """One page of a queue's jobs in one state: (records, next cursor),
        the cursor None at the end. ``state``: queued (or ready), scheduled,
        leased, done (succeeded, skipped, canceled within retention) or dead.
        Order: ready = claim order; scheduled = due time; leased = lease
        expiry; done = record expiry; dead = when it died. Each call reads at
        most ``count`` (<= 1000) entries of one state set (ZRANGE by rank
        from the cursor's entry, O(log N + count)), never the keyspace; for
        queued jobs, of the ready set and the line (LRANGE from the cursor's
        position, which an LPOS bounded by that position finds again once
        claims moved it). Jobs that change state while you page may be
        missed or seen twice.

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
        index, after = listing.parse_cursor(cursor, len(shards))
        qk = self.keys(shards[index])
        key = getattr(qk, LIST_STATES[state])
        with redis_errors(self.url, "jobs"):
            if key == qk.ready:
                rows, nxt = await listing.queued_page(self.redis, qk, after, count)
            else:
                rows = await listing.page(self.redis, key, after, count)
                nxt = listing.next_after(rows, count)
            records = await self._records(qk, name, rows, key == qk.leases)
        if key == qk.ready:  # a stale entry of the line names a job no longer queued
            records = [r for r in records if r.state == "queued"]
        if correlation_id is not None:
            records = [r for r in records if r.correlation_id == correlation_id]
        if nxt is not None:
            return records, f"{index}:{listing.cursor_text(nxt)}"
        if index + 1 < len(shards):
            return records, f"{index + 1}:"
        return records, None

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


def _rate(queue: str, rate: Rate) -> Rate:
    if not isinstance(rate, Rate):
        raise ConfigError(f"queue rate of {queue!r} must be an lq.Rate, got {rate!r}")
    return rate


def _positive_limit(queue: str, limit: int) -> int:
    if not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"queue limit of {queue!r} must be an int >= 1, got {limit!r}")
    return limit

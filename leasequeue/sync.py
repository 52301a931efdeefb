"""SyncApp: the producer API for code without an event loop (WSGI, Django,
Flask, management commands, scripts) on redis-py's synchronous client.

The same scripts, checks, payload encoding, key layout and typed errors as
App (they come from producer.py, store/scripts.py and store/keys.py); it
enqueues, reads and waits for jobs, and never runs handlers. Thread-safe:
the client's pool hands each thread its own connection."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Unpack

from redis import Redis as SyncRedis

from . import codec
from .app import App
from .errors import RedisUnavailable
from .models import EnqueuedJob, JobRecord, QueueStats
from .producer import (
    EnqueueOptions,
    JobRequest,
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
from .registry import Defaults, Registry
from .store.connection import is_memory_url
from .store.keys import (
    CACHED_QUEUES,
    DEFAULT_PREFIX,
    QueueKeys,
    check_prefix,
    check_queue_name,
    queues_key,
)
from .store.settings import StoreSettings, with_durable
from .store.shards import Shards, combine, logical
from .store.sync_scripts import SyncScripts, connect_sync
from .store.translate import redis_errors

_new = tuple.__new__


class SyncApp:
    """Enqueue, enqueue_many, get_job, wait and stats, synchronously.

    ``SyncApp(url, prefix=...)`` is a producer-only client (any job name goes
    to the default queue unless ``queue=`` says otherwise);
    ``SyncApp.from_app(app)`` shares an App's prefix, registry (job name ->
    queue), shard counts, payload limit and store settings, so a web process
    routes jobs exactly as the service that declares them."""

    def __init__(
        self,
        url: str = "memory://",
        *,
        prefix: str = DEFAULT_PREFIX,
        defaults: Defaults | None = None,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD,
        settings: StoreSettings | None = None,
        queue_shards: dict[str, int] | None = None,
        durable: bool = False,
        durable_timeout: float = 1.0,
        redis: SyncRedis | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.url = url
        self.prefix = check_prefix(prefix)
        self.registry = registry if registry is not None else Registry(defaults or Defaults())
        self.settings = with_durable(settings or StoreSettings(), durable, durable_timeout)
        self.shards = Shards(self.prefix, queue_shards or {})
        self.producer = Producer(self.registry, self.shards, max_payload_bytes)
        self.redis: SyncRedis = redis if redis is not None else connect_sync(url)
        self.scripts = SyncScripts(self.redis, url, self.settings)
        self._verified: set[str] = set()

    @classmethod
    def from_app(cls, app: App, redis: SyncRedis | None = None) -> SyncApp:
        """A sync producer for the same service as ``app`` (its own connections)."""
        sync = cls(app.url, prefix=app.prefix, max_payload_bytes=app.producer.max_payload_bytes,
                   settings=app.settings, redis=redis, registry=app.registry)
        sync.shards = sync.producer.shards = app.shards
        sync.producer.queue_rates = app.queue_rates  # their limit keys are checked too
        return sync

    # -- enqueue --------------------------------------------------------------

    def enqueue(self, name: str, payload: dict[str, Any] | None = None,
                **options: Unpack[EnqueueOptions]) -> EnqueuedJob:
        """Enqueue one job (App.enqueue, synchronously; the same options). A
        ``job_id`` that exists already returns that job with ``created=False``."""
        values = enqueue_options(options)  # (every option, in Producer.one's order)
        logical_queue, keys, job = self.producer.one(name, payload, *values, None)
        if logical_queue not in self._verified:
            self.verify_queues([logical_queue])
        ((created, state),) = self.scripts.enqueue(keys, [job])
        # tuple.__new__: the named tuple's own __new__ is a Python function around it
        return _new(EnqueuedJob, (job.id, logical_queue, job.name,
                                  drawn_created(created, options.get("job_id")), state))

    def enqueue_many(self, requests: Iterable[JobRequest]) -> list[EnqueuedJob]:
        """Enqueue a batch: one script call per queue and chunk of 500 jobs.
        Every job is checked before anything is written."""
        batch = list(requests)
        prepared = self.producer.prepare_many(batch)
        self.verify_queues({queue for queue, _ in prepared})
        answers: list[EnqueuedJob | None] = [None] * len(prepared)
        for physical, indexes in self.producer.group(prepared).items():
            qk = self.shards.keys(physical)
            for chunk in chunks(indexes):
                jobs = [prepared[i][1] for i in chunk]
                self.producer.answer(answers, jobs, physical, chunk, self.scripts.enqueue(qk, jobs),
                                     batch)
        return list(filter(None, answers))  # (every one is set: a C loop to retype it)

    def verify_queues(self, queues: Iterable[str]) -> None:
        """App.verify_queues: the shard count recorded in Redis must be this
        process's (ConfigError otherwise); once per queue per process."""
        for queue in queues:
            name = check_queue_name(logical(queue))
            if name in self._verified:
                continue
            configured = self.shards.count(name)
            recorded = self.scripts.queue_config(self.shards.keys(name), configured)
            if recorded != configured:
                raise shard_mismatch(name, recorded, configured, self.prefix)
            with redis_errors(self.url, "verify_queues"):
                self.redis.sadd(queues_key(self.prefix), name)
            if len(self._verified) >= CACHED_QUEUES:  # ever new queues: start again
                self._verified.clear()  # (each checked again on its next use)
            self._verified.add(name)

    # -- reading and waiting ----------------------------------------------------

    def get_job(self, job_id: str, queue: str | None = None) -> JobRecord:
        """State, counters, instants, last error, payload and result of a job."""
        queues = self.producer.queues_to_search(queue)
        for q in queues:
            record = self._read(job_id, q, self.producer.keys_for(q, job_id))
            if record is not None:
                return record
        raise not_found(job_id, queues)

    def _read(self, job_id: str, queue: str, qk: QueueKeys) -> JobRecord | None:
        with redis_errors(self.url, "get_job"):
            pipe = self.redis.pipeline(transaction=False)
            queue_job_reads(pipe, qk, job_id)
            replies = pipe.execute()
        return decode_job(job_id, queue, replies)

    def wait(self, job_id: str, timeout: float | None = None, queue: str | None = None) -> Any:
        """Block until a job ends and return its result; JobDead /
        JobCanceled / Timeout / JobNotFound exactly as App.wait (same script,
        same notify list, same 2 s slices: a dropped connection costs one
        slice, never the ending)."""
        clock = WaitClock(job_id, timeout)
        q, qk = self._locate(job_id, queue)
        blocking = not is_memory_url(self.url)  # the embedded store cannot block
        while True:
            block = clock.block()
            try:
                state = self.scripts.watch(qk, job_id, clock.ttl_ms(block))
                if watched_ended(state, job_id, q):
                    return result_of(self.get_job(job_id, q))
                clock.check_expired()
                if blocking:
                    self._block_on(qk.notify(job_id), block)
                else:
                    time.sleep(min(block, 0.005))
            except RedisUnavailable:
                pause = clock.pause()
                if pause is None:
                    raise
                time.sleep(pause)

    def _locate(self, job_id: str, queue: str | None) -> tuple[str, QueueKeys]:
        queues = self.producer.queues_to_search(queue)
        for q in queues:
            qk = self.producer.keys_for(q, job_id)
            with redis_errors(self.url, "locate"):
                if self.redis.hexists(qk.jobs, job_id):
                    return logical(q), qk
        raise not_found(job_id, queues)

    def _block_on(self, notify: str, block: float) -> None:
        """BLPOP the notify list; a token taken is put back for the job's
        other waiters (App._block_on)."""
        with redis_errors(self.url, "wait"):
            if self.redis.blpop([notify], timeout=max(block, 0.01)):
                pipe = self.redis.pipeline(transaction=False)
                pipe.rpush(notify, b"1")
                pipe.pexpire(notify, 10_000)
                pipe.execute()

    def stats(self, queue: str | None = None) -> QueueStats:
        """A queue's counts and counters (App.stats); UnknownQueue for a queue
        nothing uses."""
        q = queue or self.registry.defaults.queue
        stats = combine(q, [self.scripts.stats(self.shards.keys(p))
                            for p in self.shards.physical(check_queue_name(q))])
        if stats.empty and q != self.registry.defaults.queue \
                and q not in self.registry.queues():
            keys = [k for p in self.shards.physical(q)
                    for k in (self.shards.keys(p).stats, self.shards.keys(p).config)]
            with redis_errors(self.url, "stats"):
                known = self.redis.sismember(queues_key(self.prefix), q) or \
                    self.redis.exists(*keys)
            if not known:
                raise unknown_queue(q, self.prefix)
        return stats

    def ping(self) -> None:
        """Raise RedisUnavailable (naming the URL) when Redis does not answer."""
        with redis_errors(self.url, "ping"):
            self.redis.ping()

    def close(self) -> None:
        """Close this SyncApp's connections."""
        self.redis.close()

    def __enter__(self) -> SyncApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

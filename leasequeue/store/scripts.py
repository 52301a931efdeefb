"""Typed calls of the Lua scripts for one Redis client: the only place that
knows each script's ARGV order and decodes its reply. Scripts load once per
client and run with EVALSHA (reloaded on NOSCRIPT)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from ..errors import ConfigError, NotDurable
from ..log import get_log
from ..models import (
    ClaimBatch,
    ClaimedJob,
    FailOutcome,
    NewJob,
    QueueStats,
    ReapOutcome,
)
from .connection import is_cluster
from .direct import run_and_wait, run_direct
from .keys import LimiterKeys, QueueKeys
from .loader import script_source
from .record import text
from .settings import StoreSettings
from .specs import SPECS
from .translate import translate_errors


class Scripts:
    """Registered scripts for one Redis client, with typed calls."""

    def __init__(self, redis: Redis, url: str, settings: StoreSettings) -> None:
        self._url = url
        self._redis = redis
        self.settings = settings
        shebang = not url.startswith("memory://")
        # the direct path needs a plain connection pool: one Redis or Sentinel
        self._direct = shebang and not is_cluster(redis)
        self._scripts = {name: redis.register_script(script_source(name, shebang))
                         for name in SPECS}
        self._key_cache: dict[tuple[str, QueueKeys | LimiterKeys], list[bytes]] = {}

    def _keys_of(self, name: str, qk: QueueKeys | LimiterKeys) -> list[bytes]:
        # built and encoded once per (script, queue): redis-py would otherwise
        # encode every key name on every call, a good part of a small call's cost
        cached = self._key_cache.get((name, qk))
        if cached is None:
            cached = [getattr(qk, key).encode() for key in SPECS[name].keys]
            self._key_cache[(name, qk)] = cached
        return cached

    async def run(self, name: str, qk: QueueKeys | LimiterKeys, args: Sequence[Any]) -> Any:
        keys = self._keys_of(name, qk)
        if self._direct:
            # a claim that may have reached Redis is never sent twice: its jobs
            # would be leased to nobody (every other script is fenced or idempotent)
            call = run_direct(self._redis, self._scripts[name], keys, args,
                              retry=name != "claim")
        else:
            call = self._scripts[name](keys=keys, args=list(args))
        return await translate_errors(self._url, name, call)

    async def run_durable(self, name: str, qk: QueueKeys, args: Sequence[Any]) -> Any:
        """run(), then WAIT for the configured replicas; NotDurable when fewer
        acknowledged in time (the writes are on the master, maybe not beyond)."""
        s = self.settings
        if s.durable_replicas <= 0:
            return await self.run(name, qk, args)
        reply, acked = await translate_errors(self._url, name, run_and_wait(
            self._redis, self._scripts[name], self._keys_of(name, qk), list(args),
            s.durable_replicas, s.durable_timeout_ms))
        if acked < s.durable_replicas:
            raise NotDurable(name, acked, s.durable_replicas, reply)
        return reply

    # -- one method per script ------------------------------------------------

    async def enqueue(self, qk: QueueKeys, jobs: Sequence[NewJob]) -> list[tuple[bool, str]]:
        s = self.settings
        args: list[Any] = [s.events_maxlen, s.audit_flag, s.wake_cap]
        for j in jobs:
            args += [j.id, j.name, j.payload, j.delay_ms, j.priority, j.max_attempts,
                     j.max_infra]
        reply = await self.run_durable("enqueue", qk, args)
        return [(bool(reply[i]), text(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def claim(self, qk: QueueKeys, count: int, lease_ms: int, worker_id: str) -> ClaimBatch:
        s = self.settings
        reply = await self.run(
            "claim", qk,
            [count, lease_ms, worker_id, s.promote_batch, s.events_maxlen, s.audit_flag,
             s.letters_maxlen],
        )
        jobs = []
        queue = qk.queue
        for i in range(3, 3 + 10 * int(reply[2]), 10):
            r = reply[i:i + 10]
            jobs.append(ClaimedJob(
                r[0].decode(), queue, int(r[1]), int(r[2]), r[3].decode(), r[4], int(r[5]),
                int(r[6]), int(r[7]), int(r[8]), int(r[9]),
            ))
        return ClaimBatch(int(reply[0]), int(reply[1]), jobs)

    async def renew(self, qk: QueueKeys, held: Sequence[tuple[str, int]],
                    lease_ms: int) -> list[int]:
        args: list[Any] = [lease_ms, self.settings.events_maxlen]
        for job_id, token in held:
            args += [job_id, token]
        return [int(x) for x in await self.run("renew", qk, args)]

    async def ack(self, qk: QueueKeys, outcome: str, retention_ms: int,
                  items: Sequence[tuple[str, int, bytes]]) -> list[int]:
        """Finish a batch with one outcome and retention; items: (id, token, result)."""
        args: list[Any] = [self.settings.events_maxlen, self.settings.audit_flag, outcome,
                           retention_ms]
        for item in items:
            args.extend(item)
        try:
            reply = await self.run_durable("ack", qk, args)
        except NotDurable as exc:
            reply = exc.reply  # the acks are written; a failover now may undo them
            get_log("scripts").warning("acks not confirmed by a replica in time",
                                       acked=exc.acked, wanted=exc.wanted, jobs=len(items))
        return [int(x) for x in reply]

    async def fail(self, qk: QueueKeys, job_id: str, token: int, kind: str, reason: str,
                   error: str, delay_ms: int) -> FailOutcome:
        s = self.settings
        r = await self.run(
            "fail", qk,
            [job_id, token, kind, reason, error, delay_ms, s.events_maxlen, s.letters_maxlen,
             s.retention_ms],
        )
        return FailOutcome(int(r[0]), text(r[1]), int(r[2]), int(r[3]), int(r[4]))

    async def release(self, qk: QueueKeys, held: Sequence[tuple[str, int]], delay_ms: int,
                      why: str) -> list[int]:
        s = self.settings
        args: list[Any] = [delay_ms, s.retention_ms, s.events_maxlen, why]
        for job_id, token in held:
            args += [job_id, token]
        return [int(x) for x in await self.run("release", qk, args)]

    async def reap(self, qk: QueueKeys, batch: int, backoff_base_ms: int,
                   backoff_cap_ms: int) -> ReapOutcome:
        s = self.settings
        r = await self.run(
            "reap", qk,
            [batch, backoff_base_ms, backoff_cap_ms, s.retention_ms, s.events_maxlen,
             s.letters_maxlen],
        )
        return ReapOutcome(int(r[0]), int(r[1]), int(r[2]), int(r[3]))

    async def expire(self, qk: QueueKeys, batch: int) -> int:
        return int(await self.run("expire", qk, [batch]))

    async def cancel(self, qk: QueueKeys, job_id: str, token: int = 0) -> tuple[str, str]:
        """Cancel a job; with ``token``, only request the cancel of that run."""
        s = self.settings
        r = await self.run("cancel", qk, [job_id, s.retention_ms, s.events_maxlen, token])
        return text(r[0]), text(r[1])

    async def replay(self, qk: QueueKeys, job_ids: Sequence[str]) -> list[int]:
        return [int(x) for x in await self.run(
            "replay", qk, [self.settings.events_maxlen, *job_ids])]

    async def purge(self, qk: QueueKeys, batch: int) -> int:
        return int(await self.run("purge", qk, [batch]))

    async def stats(self, qk: QueueKeys, max_classes: int = 32) -> QueueStats:
        r = await self.run("stats", qk, [max_classes])
        now = int(r[0])
        oldest = int(r[6])
        next_due = int(float(r[7]))
        flat = r[8]
        counters = {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        return QueueStats(
            queue=qk.queue, now_ms=now, ready=int(r[1]), scheduled=int(r[2]), leased=int(r[3]),
            dead=int(r[4]), retained=int(r[5]),
            oldest_ready_age_ms=None if oldest < 0 else max(0, now - oldest),
            next_due_in_ms=None if next_due < 0 else max(0, next_due - now),
            counters=counters,
        )

    async def queue_config(self, qk: QueueKeys, shards: int, expected: int = 0) -> int:
        """Record a logical queue's shard count; returns the recorded count (0:
        none). ``expected`` 0 records only when none is recorded yet; > 0
        replaces the count only while it is ``expected`` (a reshard); -1 only
        reads it."""
        raw = await self.run("queue_config", qk, [shards, expected])
        if raw is None:
            return 0
        recorded = text(raw)
        if not recorded.isdigit() or int(recorded) < 1:
            raise ConfigError(f"{qk.config} holds shards={recorded!r}, not a shard count")
        return int(recorded)

    # -- the cluster-wide limiter ---------------------------------------------

    async def limiter_acquire(self, lk: LimiterKeys, holder: str, limit: int, lease_ms: int,
                              replace: bool) -> tuple[int, str]:
        r = await self.run("limiter_acquire", lk,
                           [holder, limit, lease_ms, "replace" if replace else "take"])
        return int(r[0]), text(r[1])

    async def limiter_renew(self, lk: LimiterKeys, holders: Sequence[str],
                            lease_ms: int) -> list[int]:
        return [int(x) for x in await self.run("limiter_renew", lk, [lease_ms, *holders])]

    async def limiter_release(self, lk: LimiterKeys, holders: Sequence[str]) -> int:
        return int(await self.run("limiter_release", lk, list(holders)))



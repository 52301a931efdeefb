"""Limiters count runs against a limit: in this process (LocalLimiter, the
default) or across every worker that shares a Redis and a limiter prefix
(RedisLimiter). They hand out and take back slots; they never run jobs.

A Redis outage counts as "no slot free", never as "go ahead"."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from .errors import RedisUnavailable, ScriptError
from .log import get_log
from .store.connection import close_client, connect
from .store.keys import check_prefix, default_limiter_prefix, limit_keys, rate_keys
from .store.scripts import RateAnswer, Scripts
from .store.settings import StoreSettings
from .store.specs import LimiterAcquireReply, LimiterRenewReply
from .store.translate import redis_errors


@dataclass(frozen=True, slots=True)
class Grant:
    taken: bool
    evicted: str | None = None  # the holder `replace` pushed out


NO_SLOT = Grant(False)
TAKEN = Grant(True)


class RateCounter:
    """Rate limits through lua/rate.lua, always in Redis (a rate counted per
    process would let N replicas run N times the rate): the limiter's Redis
    and prefix for a RedisLimiter, the App's Redis and ``<prefix>:limiter``
    for the in-process limiter. Errors are raised (RedisUnavailable,
    ScriptError); the caller decides what an outage means."""

    STALE_US = 600_000_000  # a reservation unclaimed 10 min past its instant is dropped

    def __init__(self, scripts: Scripts, prefix: str) -> None:
        self.scripts = scripts
        self.prefix = prefix

    async def call(self, name: str, key: str | None, holders: list[str], interval_us: int,
                   tolerance_us: int, mode: str, push_us: int = 0,
                   ahead: int = 0) -> RateAnswer:
        return await self.scripts.rate(rate_keys(self.prefix, name, key), holders, interval_us,
                                       tolerance_us, mode, push_us, self.STALE_US, ahead)


class Limiter(Protocol):
    @property
    def description(self) -> str: ...

    @property
    def rates(self) -> RateCounter:
        """Where rate limits are counted (bound: after bind())."""

    def bind(self, redis: Redis, url: str, prefix: str) -> None:
        """Called by the worker with its App's connection and key prefix."""

    async def check(self) -> None:
        """Raise at boot when the limiter cannot work."""

    async def acquire(self, name: str, limit: int, holder: str, replace: bool) -> Grant: ...

    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told once),
        or LOST (its slot lapsed)."""

    async def release(self, name: str, holders: list[str]) -> None: ...

    async def close(self) -> None:
        """Close what the limiter opened itself (not a client it was given)."""


class LocalLimiter:
    """Counts in this process only: correct on a single replica; with several
    replicas ``max_concurrent=1`` means one run per process."""

    description = "in-process"

    def __init__(self) -> None:
        self._holders: dict[str, dict[str, None]] = {}  # insertion order = age
        # holders pushed out by `replace`, until their renew has been told once
        # (bounded: a holder is a run this process started and then releases)
        self._evicted: dict[str, set[str]] = {}
        self._rates: RateCounter | None = None

    def bind(self, redis: Redis, url: str, prefix: str) -> None:
        """Called by the worker with its App's connection and key prefix."""
        if self._rates is None:  # rates are counted in the App's Redis
            self._rates = RateCounter(Scripts(redis, url, StoreSettings()),
                                      default_limiter_prefix(prefix))

    @property
    def rates(self) -> RateCounter:
        """The rate counter of this limiter (rates are always counted in Redis)."""
        if self._rates is None:
            raise RuntimeError("LocalLimiter used before bind(): pass it to a Worker or App")
        return self._rates

    async def check(self) -> None:
        """Raise at boot when the limiter cannot work."""
        return None

    async def acquire(self, name: str, limit: int, holder: str, replace: bool) -> Grant:
        """Take a slot of ``name`` (at most ``limit`` holders) for ``holder``; with
        ``replace``, push the oldest holder out when it is full."""
        holders = self._holders.setdefault(name, {})
        if holder in holders or len(holders) < limit:
            holders[holder] = None
            return TAKEN
        if replace:
            oldest = next(iter(holders))
            del holders[oldest]
            self._evicted.setdefault(name, set()).add(oldest)
            holders[holder] = None
            return Grant(True, oldest)
        return NO_SLOT

    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told once),
        or LOST (its slot lapsed)."""
        held = self._holders.get(name, {})
        evicted = self._evicted.get(name, set())
        answers = []
        for h in holders:
            if h in held:
                answers.append(LimiterRenewReply.RENEWED)
            elif h in evicted:
                evicted.discard(h)
                answers.append(LimiterRenewReply.EVICTED)
            else:
                answers.append(LimiterRenewReply.LOST)
        return answers

    async def close(self) -> None:
        """Close what the limiter opened itself (not a client it was given)."""
        return None

    async def release(self, name: str, holders: list[str]) -> None:
        """Give these holders' slots back."""
        held = self._holders.get(name, {})
        evicted = self._evicted.get(name, set())
        for holder in holders:
            held.pop(holder, None)
            evicted.discard(holder)
        # per-key limits come and go: an empty one is forgotten
        if not held:
            self._holders.pop(name, None)
        if not evicted:
            self._evicted.pop(name, None)


class RedisLimiter:
    """Counts across processes: one ZSET per limit (holder -> lease expiry on
    the server clock) at ``{prefix:name}``, and the holders `replace` evicted at
    ``{prefix:name}:evicted`` (told once to their renew). A holder that dies stops renewing
    and its slot frees itself when the lease lapses. Services built with the
    same ``prefix`` (and Redis) share every limit of the same name."""

    def __init__(self, url: str | None = None, *, prefix: str | None = None,
                 lease: float = 30.0, redis: Redis | None = None) -> None:
        self._url = url
        self._redis = redis if redis is not None else (connect(url) if url else None)
        self._owns_client = redis is None and url is not None
        self.prefix = check_prefix(prefix) if prefix is not None else None
        self.lease_ms = int(lease * 1000)
        self._scripts: Scripts | None = None
        self._log = get_log("limiter")
        self._warned_at = 0.0
        self._rates: RateCounter | None = None
        if self._redis is not None:
            self._scripts = Scripts(self._redis, url or "(limiter)", StoreSettings())

    @property
    def description(self) -> str:
        """Where the limits live, for the boot log."""
        return f"redis ({self.prefix})"

    def bind(self, redis: Redis, url: str, prefix: str) -> None:
        """Called by the worker with its App's connection and key prefix."""
        if self._redis is None:
            self._redis, self._url = redis, url
            self._scripts = Scripts(redis, url, StoreSettings())
        if self.prefix is None:
            self.prefix = f"{prefix}:limiter"

    @property
    def rates(self) -> RateCounter:
        """The rate counter of this limiter (rates are always counted in Redis)."""
        scripts, prefix = self._ready()
        if self._rates is None or self._rates.scripts is not scripts:
            self._rates = RateCounter(scripts, prefix)
        return self._rates

    def _ready(self) -> tuple[Scripts, str]:
        if self._scripts is None or self.prefix is None:
            raise RuntimeError("RedisLimiter used before bind(): pass it to a Worker or App")
        return self._scripts, self.prefix

    async def check(self) -> None:
        """A limiter without a reachable Redis is a boot error, never a silent
        fall-back to counting in one process."""
        self._ready()
        assert self._redis is not None
        with redis_errors(self._url or "(limiter)", "ping"):
            await self._redis.ping()

    async def acquire(self, name: str, limit: int, holder: str, replace: bool) -> Grant:
        """Take a slot of ``name`` (at most ``limit`` holders) for ``holder``; with
        ``replace``, push the oldest holder out when it is full."""
        scripts, prefix = self._ready()
        try:
            code, evicted = await scripts.limiter_acquire(
                limit_keys(prefix, name), holder, limit, self.lease_ms, replace)
        except (RedisUnavailable, ScriptError) as exc:
            if time.monotonic() - self._warned_at > 5:  # a line every 5 s at most
                self._warned_at = time.monotonic()
                self._log.warning("limiter unavailable: counted as no slot free", limit=name,
                                  error=str(exc))
            return NO_SLOT
        if code == LimiterAcquireReply.NO_SLOT:
            return NO_SLOT
        return Grant(True, evicted or None)

    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told once),
        or LOST (its slot lapsed)."""
        scripts, prefix = self._ready()
        return await scripts.limiter_renew(limit_keys(prefix, name), holders, self.lease_ms)

    async def release(self, name: str, holders: list[str]) -> None:
        """Give these holders' slots back."""
        scripts, prefix = self._ready()
        try:
            await scripts.limiter_release(limit_keys(prefix, name), holders)
        except (RedisUnavailable, ScriptError) as exc:
            # the slot frees itself when its lease lapses
            self._log.warning("limiter release failed; the slot lapses on its own", limit=name,
                              error=str(exc))

    async def holders(self, name: str) -> int:
        """How many holders a limit has now (leases not lapsed by the server
        clock): read-only, for the metrics exporter."""
        _, prefix = self._ready()
        assert self._redis is not None
        key = limit_keys(prefix, name).limit
        with redis_errors(self._url or "(limiter)", "limiter holders"):
            seconds, micros = await self._redis.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            return int(await self._redis.zcount(key, f"({now_ms}", "+inf"))

    async def close(self) -> None:
        """Close the client this limiter opened from its own URL."""
        if self._owns_client and self._redis is not None:
            await close_client(self._redis)

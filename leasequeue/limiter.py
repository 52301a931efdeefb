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
    # refused, and registered as a waiter: a release of the limit will hand
    # the waiter's entry back (to wake its job)
    waiting: bool = False
    # waiter entries to wake: slots this call found held by lapsed holders
    woken: tuple[str, ...] = ()


NO_SLOT = Grant(False)
TAKEN = Grant(True)
WAITING = Grant(False, waiting=True)

WAITERS_CAP = 1000  # most waiters per limit; more are refused plainly (slot_backoff)
# how long LocalLimiter keeps a holder `replace` evicted (its run releases it
# before; this bounds the markers of runs whose release never came)
EVICTED_MARKER_S = 600.0


@dataclass(frozen=True, slots=True)
class Waiter:
    """A run that waits for a slot of a keyed limit: ``entry`` says where its
    job lives (handed back by a release, to wake it), ``wait_ms`` how long
    it is kept (the job's fallback delay: it comes back on its own then)."""

    entry: str
    wait_ms: int


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

    async def acquire(self, name: str, limit: int, holder: str, replace: bool,
                      waiter: Waiter | None = None) -> Grant:
        """Take a slot; refused with a ``waiter``, register it (Grant.waiting)."""

    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told until its release),
        or LOST (its slot lapsed)."""

    async def release(self, name: str, holders: list[str]) -> list[str]:
        """Give slots back; the waiter entries to wake (one per slot freed)."""

    async def close(self) -> None:
        """Close what the limiter opened itself (not a client it was given)."""


class LocalLimiter:
    """Counts in this process only: correct on a single replica; with several
    replicas ``max_concurrent=1`` means one run per process."""

    description = "in-process"

    def __init__(self) -> None:
        self._holders: dict[str, dict[str, None]] = {}  # insertion order = age
        # holders pushed out by `replace` -> until when (monotonic): each renew
        # is told, until the run's release or EVICTED_MARKER_S (a release that
        # never came), as a Redis marker lapses
        self._evicted: dict[str, dict[str, float]] = {}
        # waiters per limit: entry -> until when it is kept (monotonic), oldest first
        self._waiters: dict[str, dict[str, float]] = {}
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

    async def acquire(self, name: str, limit: int, holder: str, replace: bool,
                      waiter: Waiter | None = None) -> Grant:
        """Take a slot of ``name`` (at most ``limit`` holders) for ``holder``; with
        ``replace``, push the oldest holder out when it is full; refused with
        a ``waiter``, register it (a release hands its entry back)."""
        holders = self._holders.setdefault(name, {})
        _drop_past(self._evicted, name)
        if holder in holders or len(holders) < limit:
            holders[holder] = None
            _drop_past(self._waiters, name)
            return TAKEN
        if replace:
            oldest = next(iter(holders))
            del holders[oldest]
            self._evicted.setdefault(name, {})[oldest] = time.monotonic() + EVICTED_MARKER_S
            holders[holder] = None
            return Grant(True, oldest)
        if waiter is not None and waiter.wait_ms > 0:
            _drop_past(self._waiters, name)
            waiters = self._waiters.setdefault(name, {})
            if waiter.entry in waiters or len(waiters) < WAITERS_CAP:
                waiters.pop(waiter.entry, None)  # registered again: to the back
                waiters[waiter.entry] = time.monotonic() + waiter.wait_ms / 1000
                return WAITING
            # (a full line: refused plainly, the run falls back to slot_backoff)
        return NO_SLOT


    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told until its release),
        or LOST (its slot lapsed)."""
        held = self._holders.get(name, {})
        _drop_past(self._evicted, name)
        evicted = self._evicted.get(name, {})
        answers = []
        for h in holders:
            if h in held:
                answers.append(LimiterRenewReply.RENEWED)
            elif h in evicted:  # (until its release: a renew sent again is told again)
                answers.append(LimiterRenewReply.EVICTED)
            else:
                answers.append(LimiterRenewReply.LOST)
        return answers

    async def close(self) -> None:
        """Close what the limiter opened itself (not a client it was given)."""
        return None

    async def release(self, name: str, holders: list[str]) -> list[str]:
        """Give these holders' slots back; the waiter entries to wake, one per
        slot freed, oldest first."""
        held = self._holders.get(name, {})
        evicted = self._evicted.get(name, {})
        removed = 0
        for holder in holders:
            if holder in held:
                del held[holder]
                removed += 1
            evicted.pop(holder, None)
        # per-key limits come and go: an empty one is forgotten
        if not held:
            self._holders.pop(name, None)
        if not evicted:
            self._evicted.pop(name, None)
        woken: list[str] = []
        if removed and name in self._waiters:
            _drop_past(self._waiters, name)
            waiters = self._waiters.get(name, {})
            while waiters and len(woken) < removed:
                entry = next(iter(waiters))
                del waiters[entry]
                woken.append(entry)
            if not waiters:
                self._waiters.pop(name, None)
        return woken


def _drop_past(table: dict[str, dict[str, float]], name: str) -> None:
    """LocalLimiter's timed entries of ``name`` (entry -> until when,
    monotonic) past their time dropped: the waiters past their fallback
    instant (their jobs came back on their own), the eviction markers past
    EVICTED_MARKER_S; none left, ``name`` is forgotten."""
    entries = table.get(name)
    if entries is None:
        return
    now = time.monotonic()
    for entry in [e for e, until in entries.items() if until <= now]:
        del entries[entry]
    if not entries:
        del table[name]


class RedisLimiter:
    """Counts across processes: one ZSET per limit (holder -> lease expiry on
    the server clock) at ``{prefix:name}``, and the holders `replace` evicted
    at ``{prefix:name}:evicted`` (told to their renews until released). A
    holder that dies stops renewing and its slot frees itself when the lease
    lapses. Services built with the same ``prefix`` (and Redis) share every
    limit of the same name."""

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

    async def acquire(self, name: str, limit: int, holder: str, replace: bool,
                      waiter: Waiter | None = None) -> Grant:
        """Take a slot of ``name`` (at most ``limit`` holders) for ``holder``; with
        ``replace``, push the oldest holder out when it is full; refused with
        a ``waiter``, register it in the same call (a release hands it back)."""
        scripts, prefix = self._ready()
        try:
            answer = await scripts.limiter_admit(
                limit_keys(prefix, name), holder, limit, self.lease_ms, replace,
                waiter.entry if waiter is not None else "",
                waiter.wait_ms if waiter is not None else 0, WAITERS_CAP)
        except (RedisUnavailable, ScriptError) as exc:
            if time.monotonic() - self._warned_at > 5:  # a line every 5 s at most
                self._warned_at = time.monotonic()
                self._log.warning("limiter unavailable: counted as no slot free", limit=name,
                                  error=str(exc))
            return NO_SLOT
        if answer.code == LimiterAcquireReply.NO_SLOT:
            return NO_SLOT
        if answer.code == LimiterAcquireReply.WAITING:
            return WAITING
        return Grant(True, answer.evicted or None, woken=tuple(answer.woken))

    async def renew(self, name: str, holders: list[str]) -> list[LimiterRenewReply]:
        """Per holder: RENEWED, EVICTED (pushed out by a `replace`; told until its release),
        or LOST (its slot lapsed)."""
        scripts, prefix = self._ready()
        return await scripts.limiter_renew(limit_keys(prefix, name), holders, self.lease_ms)

    async def release(self, name: str, holders: list[str]) -> list[str]:
        """Give these holders' slots back; the waiter entries to wake, one per
        slot freed (popped in the same call)."""
        scripts, prefix = self._ready()
        try:
            _, woken = await scripts.limiter_free(limit_keys(prefix, name), holders)
        except (RedisUnavailable, ScriptError) as exc:
            # the slot frees itself when its lease lapses; its waiters come
            # back after their fallback delay
            self._log.warning("limiter release failed; the slot lapses on its own", limit=name,
                              error=str(exc))
            return []
        return woken

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

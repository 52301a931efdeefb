"""The resource ledger: a run records in Redis the external resources it
opens (kind, key, owner run, opened at) and clears them when it closes them;
three idempotent reconcilers close what no live run owns — at worker boot
(this worker id's earlier life), before a key is opened again (sweep), and
a TTL janitor (runtime/janitor.py). Every close goes through the close
function registered with ``app.resource_kind``; it may run twice, and
concurrently, so it must be idempotent. This module never claims jobs."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from redis.asyncio import Redis

from .errors import ConfigError, MalformedJob, RedisUnavailable, ResourceBusy, ScriptError
from .log import get_log
from .store.keys import QueueKeys, ResourceKeys, check_resource_kind, resource_keys
from .store.record import parse_record, text
from .store.scripts import Scripts
from .store.specs import ResourceClaimReply, ResourceOpenReply
from .store.translate import redis_errors

CloseFn = Callable[[str], Any]  # close(key), sync or async; must be idempotent
OpenFn = Callable[[str], Any]  # open(key) -> the value `async with` gives, sync or async

DEFAULT_TTL = 3600.0
CLOSE_LEASE = 60.0  # a reconciler holds an entry this long while it closes it
OPEN_WAIT = 5.0  # most ctx.resource waits for a reconciler closing the same key
PAGE = 100  # ledger entries read per call

Owner = tuple[str, str, int]  # (physical queue, job id, token) of the run that opened it


@dataclass(frozen=True, slots=True)
class ResourceKind:
    name: str
    close: CloseFn
    ttl: float


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry as read from Redis."""

    kind: str
    key: str
    owner: Owner
    worker: str
    life: str
    opened_ms: int
    ttl_ms: int


async def call(fn: Callable[[str], Any], key: str) -> Any:
    """Call a user's open or close function, sync (in a thread) or async."""
    if inspect.iscoroutinefunction(fn):
        return await fn(key)
    value = await anyio.to_thread.run_sync(fn, key)
    if inspect.isawaitable(value):
        return await value
    return value


class ResourceKinds:
    """The kinds an App knows, with their close function and TTL."""

    def __init__(self) -> None:
        self._kinds: dict[str, ResourceKind] = {}

    def register(self, name: str, close: CloseFn, ttl: float = DEFAULT_TTL) -> ResourceKind:
        check_resource_kind(name)
        if not callable(close):
            raise ConfigError(f"resource kind {name!r}: close must be callable (key -> None)")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
            raise ConfigError(f"resource kind {name!r}: ttl must be seconds > 0, got {ttl!r}")
        if name in self._kinds:
            raise ConfigError(f"resource kind {name!r} is registered twice")
        kind = self._kinds[name] = ResourceKind(name, close, float(ttl))
        return kind

    def get(self, name: str) -> ResourceKind:
        try:
            return self._kinds[name]
        except KeyError:
            raise ConfigError(f"no resource kind {name!r}: register it with "
                              f"app.resource_kind({name!r}, close=...)") from None

    def find(self, name: str) -> ResourceKind | None:
        return self._kinds.get(name)

    def __bool__(self) -> bool:
        return bool(self._kinds)


class Ledger:
    """The ledger of one App prefix: record, clear, and reconcile entries."""

    def __init__(self, redis: Redis, url: str, scripts: Scripts, prefix: str,
                 kinds: ResourceKinds, queue_keys: Callable[[str], QueueKeys]) -> None:
        self._redis = redis
        self._url = url
        self._scripts = scripts
        self.prefix = prefix
        self.kinds = kinds
        self._queue_keys = queue_keys
        self._log = get_log("resources")

    # -- reading ------------------------------------------------------------------

    async def _entry(self, rk: ResourceKeys) -> Entry | None:
        with redis_errors(self._url, "resource ledger"):
            raw: Any = await self._redis.hgetall(rk.entry)
        h = {text(k): text(v) for k, v in raw.items()}
        if "job" not in h:
            return None
        return Entry(h["kind"], h["key"], (h["queue"], h["job"], int(h["token"])),
                     h.get("worker", ""), h.get("life", ""), int(h.get("opened_ms", 0)),
                     int(h.get("ttl_ms", 0)))

    async def owner_live(self, owner: Owner) -> bool:
        """Whether the run that opened a resource may still be running: its job
        is leased under that token and the lease has not run out (server
        clock). Once false it stays false (tokens never repeat)."""
        queue, job_id, token = owner
        qk = self._queue_keys(queue)
        with redis_errors(self._url, "resource owner"):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hget(qk.jobs, job_id)
                pipe.zscore(qk.leases, job_id)
                pipe.time()
                raw, lease, (sec, usec) = await pipe.execute()
        if raw is None or lease is None:
            return False
        try:
            record = parse_record(raw)
        except MalformedJob:
            return False
        now_ms = int(sec) * 1000 + int(usec) // 1000
        return (record["state"] == "leased" and int(record["token"]) == token
                and float(lease) > now_ms)

    # -- the reconcilers ------------------------------------------------------------

    async def reconcile(self, entry: Entry, closer: str) -> bool:
        """Close one orphan through its kind's close function and drop its
        entry; fenced by the owner the caller saw. False when another closer
        holds it, the entry changed, the kind is unknown here, or close failed
        (the entry stays, and a later pass tries again)."""
        kind = self.kinds.find(entry.kind)
        if kind is None:
            self._log.warning("orphan of a resource kind this App does not register: left",
                              kind=entry.kind, key=entry.key)
            return False
        rk = resource_keys(self.prefix, entry.kind, entry.key, entry.worker)
        code, _ = await self._scripts.resource_claim(rk, entry.owner, closer,
                                                     int(CLOSE_LEASE * 1000))
        if code is not ResourceClaimReply.CLAIMED:
            return False
        try:
            await call(kind.close, entry.key)
        except Exception as exc:  # a user's close: logged, retried by a later pass
            self._log.warning("closing an orphaned resource failed; it stays in the ledger",
                              kind=entry.kind, key=entry.key, error=repr(exc))
            return False
        await self._scripts.resource_clear(rk, entry.owner)
        self._log.info("orphaned resource closed", kind=entry.kind, key=entry.key,
                       owner=f"{entry.owner[1]}:{entry.owner[2]}", worker=entry.worker,
                       by=closer)
        return True

    async def boot_cleanup(self, worker_id: str, life: str) -> int:
        """Close what this worker id opened in an earlier life (its process
        died holding them). Returns how many were closed."""
        if not self.kinds:
            return 0
        wk = resource_keys(self.prefix, worker_id=worker_id)
        with redis_errors(self._url, "resource ledger"):
            members = sorted(text(m) for m in await self._redis.smembers(wk.worker))
        closed = 0
        for member in members:
            kind, _, key = member.partition(":")
            rk = resource_keys(self.prefix, kind, key, worker_id)
            entry = await self._entry(rk)
            if entry is None or entry.worker != worker_id:
                await self._scripts.resource_clear(rk, ("", "", 0))  # a stale index entry
                continue
            if entry.life != life and await self.reconcile(entry, f"boot:{worker_id}:{life}"):
                closed += 1
        return closed

    async def janitor_pass(self, closer: str, max_pages: int = 10) -> int:
        """Close resources past their TTL whose owner run is not live (a page
        of PAGE entries at a time, at most ``max_pages``). Returns how many."""
        if not self.kinds:
            return 0
        expiry = resource_keys(self.prefix).expiry
        closed = 0
        offset = 0
        for _ in range(max_pages):
            with redis_errors(self._url, "resource ledger"):
                sec, usec = await self._redis.time()
                now_ms = int(sec) * 1000 + int(usec) // 1000
                members = [text(m) for m in await self._redis.zrangebyscore(
                    expiry, "-inf", now_ms, start=offset, num=PAGE)]
            for member in members:
                kind, _, key = member.partition(":")
                entry = await self._entry(resource_keys(self.prefix, kind, key))
                if entry is None:
                    with redis_errors(self._url, "resource ledger"):
                        await self._redis.zrem(expiry, member)
                    continue
                if await self.owner_live(entry.owner):
                    offset += 1
                    continue
                if await self.reconcile(entry, closer):
                    closed += 1
                else:
                    offset += 1
            if len(members) < PAGE:
                break
        return closed


@dataclass(frozen=True, slots=True)
class RunResources:
    """What ``ctx.resource`` needs: the ledger and who the run is."""

    ledger: Ledger
    owner: Owner
    worker_id: str
    life: str

    @property
    def holder(self) -> str:
        return f"run:{self.owner[1]}:{self.owner[2]}@{self.worker_id}"

    async def _record(self, kind: ResourceKind, key: str) -> ResourceKeys:
        """Record the entry, sweeping an old one whose run is no longer live."""
        ledger = self.ledger
        rk = resource_keys(ledger.prefix, kind.name, key, self.worker_id)
        deadline = time.monotonic() + OPEN_WAIT
        while True:
            code, details = await ledger._scripts.resource_open(
                rk, self.owner, self.worker_id, self.life, int(kind.ttl * 1000))
            if code is ResourceOpenReply.OPENED:
                return rk
            if time.monotonic() >= deadline:
                raise ResourceBusy(f"resource {kind.name}:{key}: its old entry could not be "
                                   f"closed within {OPEN_WAIT}s (a reconciler holds it, or "
                                   "its close fails)")
            if code is ResourceOpenReply.CLOSING:
                await anyio.sleep(min(int(details[0]) / 1000, 0.2))
                continue
            queue, job, token, worker, _life = details
            holder: Owner = (queue, job, int(token))
            if await ledger.owner_live(holder):
                raise ResourceBusy(f"resource {kind.name}:{key} is held by the live run "
                                   f"{job}:{token} on {worker}")
            # sweep before create: the old run is gone, close its resource first
            old = await ledger._entry(resource_keys(ledger.prefix, kind.name, key, worker))
            if old is not None and old.owner == holder and not await ledger.reconcile(
                    old, self.holder):
                await anyio.sleep(0.1)  # claimed by another closer, or its close failed

    async def _clear(self, rk: ResourceKeys) -> None:
        await self.ledger._scripts.resource_clear(rk, self.owner)

    @asynccontextmanager
    async def open(self, kind_name: str, key: str, open: OpenFn | None = None,
                   close: CloseFn | None = None) -> AsyncIterator[Any]:
        kind = self.ledger.kinds.get(kind_name)
        closer = close or kind.close
        rk = await self._record(kind, key)
        try:
            value = await call(open, key) if open is not None else key
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close(rk, closer, key)
            raise
        try:
            yield value
        finally:
            with anyio.CancelScope(shield=True):
                await self._close(rk, closer, key)

    async def _close(self, rk: ResourceKeys, closer: CloseFn, key: str) -> None:
        """Close, then clear the entry; a close that raises leaves the entry
        for the reconcilers (and the error goes on)."""
        await call(closer, key)
        try:
            await self._clear(rk)
        except (RedisUnavailable, ScriptError) as exc:
            # the entry stays: a reconciler closes the (closed) resource again later
            get_log("resources").warning("resource closed but its entry not cleared",
                                         kind=rk.kind, key=key, error=str(exc))


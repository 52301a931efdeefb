"""Maps logical queues to the physical queues that hold them. A queue
declared with N > 1 shards lives in N hash tags ``{prefix:queue#k}`` so that
one hot queue can spread over a cluster's masters; a job id always routes to
the same shard, so enqueue dedup by job id still holds. One shard is no
sharding: the queue's own tag ``{prefix:queue}``. It never talks to Redis (the
count recorded in Redis is checked by App.verify_queues)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..errors import ConfigError
from ..models import QueueStats
from .keys import CACHED_QUEUES, QueueKeys, check_queue_name, queue_keys

SEPARATOR = "#"
MAX_SHARDS = 1024


def logical(name: str) -> str:
    """The logical queue of a physical queue name ("hot#2" -> "hot")."""
    return name.partition(SEPARATOR)[0]


class Shards:
    def __init__(self, prefix: str, shards: Mapping[str, int]) -> None:
        self._prefix = prefix
        self._keys: dict[str, QueueKeys] = {}  # checked names only
        self._shards: dict[str, int] = {}
        for queue, n in shards.items():
            check_shard_count(queue, n)
            if n > 1:  # one shard is the plain queue
                self._shards[check_queue_name(queue)] = n

    def count(self, queue: str) -> int:
        return self._shards.get(queue, 1)

    def physical(self, queue: str) -> list[str]:
        return layout(queue, self.count(queue))

    def layout_keys(self, queue: str, n: int) -> list[QueueKeys]:
        """Keys of every physical queue of ``queue`` laid out over ``n`` shards,
        whatever this process is configured with (for a reshard's checks)."""
        check_queue_name(queue)
        return [QueueKeys(self._prefix, name) for name in layout(queue, n)]

    def route(self, queue: str, job_id: str) -> str:
        """The physical queue a job id belongs to (crc32: stable across processes)."""
        n = self._shards.get(queue)
        if n is None:
            return queue
        return f"{queue}{SEPARATOR}{zlib.crc32(job_id.encode()) % n}"

    def keys_for(self, queue: str, job_id: str) -> QueueKeys:
        """keys(route(queue, job_id)): the keys of the shard of ``queue``
        that holds ``job_id``; an unsharded queue's, once known, from one
        dict (what each App.enqueue asks)."""
        if queue not in self._shards:
            known = self._keys.get(queue)
            if known is not None:
                return known
        return self.keys(self.route(queue, job_id))

    def keys(self, name: str) -> QueueKeys:
        """Keys of a physical queue: a plain queue name or ``queue#k``
        (ConfigError for a name that is not a str: checked first, as one
        that cannot be hashed, a list, would raise TypeError from the cache)."""
        if name.__class__ is not str:
            check_queue_name(name)
        known = self._keys.get(name)
        if known is None:
            known = self._build(name)
            if len(self._keys) >= CACHED_QUEUES:  # ever new queues: start again
                self._keys.clear()
            self._keys[name] = known
        return known

    def _build(self, name: str) -> QueueKeys:
        base, sep, index = name.partition(SEPARATOR)
        if not sep:
            return queue_keys(self._prefix, name)
        check_queue_name(base)
        n = self._shards.get(base)
        if n is None or not index.isdigit() or int(index) >= n:
            raise ConfigError(f"{name!r} is not a shard of a sharded queue")
        return QueueKeys(self._prefix, name)


def check_shard_count(queue: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SHARDS:
        raise ConfigError(f"shards of {queue!r} must be an int in 1..{MAX_SHARDS}, got {n!r}")
    return n


def layout(queue: str, n: int) -> list[str]:
    """The physical queues of a logical queue over ``n`` shards."""
    if n == 1:
        return [queue]
    return [f"{queue}{SEPARATOR}{k}" for k in range(n)]


def combine(queue: str, parts: Sequence[QueueStats]) -> QueueStats:
    """One queue's stats from its shards' stats."""
    if len(parts) == 1:
        return replace(parts[0], queue=queue)
    counters: dict[str, int] = {}
    for part in parts:
        for name, value in part.counters.items():
            counters[name] = counters.get(name, 0) + value
    ages = [p.oldest_ready_age_ms for p in parts if p.oldest_ready_age_ms is not None]
    dues = [p.next_due_in_ms for p in parts if p.next_due_in_ms is not None]
    return QueueStats(
        queue=queue, now_ms=max(p.now_ms for p in parts),
        ready=sum(p.ready for p in parts), scheduled=sum(p.scheduled for p in parts),
        leased=sum(p.leased for p in parts), dead=sum(p.dead for p in parts),
        retained=sum(p.retained for p in parts), oldest_ready_age_ms=max(ages, default=None),
        next_due_in_ms=min(dues, default=None), counters=counters,
        paused=any(p.paused for p in parts),
    )

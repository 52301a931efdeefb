"""What the dashboard's pages show, read through the App's operator API a
page at a time: queue rows with rates, limiter holders, job sections.

Every read here is bounded (a ZRANGE page, a set of queue names, one limit's
holders); nothing scans the keyspace or walks a whole state set."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..app import App
from ..models import JobRecord, JobState, QueueStats
from ..runtime.limits import job_limit_name, queue_limit_name
from ..store.keys import default_limiter_prefix, limit_keys
from ..store.record import text
from ..store.shards import Shards

RATE_WINDOW_MS = 60_000  # rates are averaged over up to the last minute of samples
RATE_MIN_MS = 1_000  # and shown once two samples are at least a second apart
RATE_COUNTERS = ("enqueued", "succeeded", "retried", "dead")
MAX_SAMPLES = 256  # per queue: a page reloaded in a loop cannot grow the book
MAX_HOLDERS_SHOWN = 100  # holders listed per limit (a limit's size is its capacity)


class RateBook:
    """Per-queue rates from the stats counters, sampled each time a page
    reads them (the server clock's now_ms): no background task, no Redis
    state. A dashboard that just started shows no rate until a second read."""

    def __init__(self) -> None:
        self._samples: dict[str, deque[tuple[int, dict[str, int]]]] = {}

    def add(self, stats: QueueStats) -> dict[str, float | None]:
        samples = self._samples.setdefault(stats.queue, deque(maxlen=MAX_SAMPLES))
        samples.append((stats.now_ms, dict(stats.counters)))
        while len(samples) > 2 and stats.now_ms - samples[1][0] >= RATE_WINDOW_MS:
            samples.popleft()
        first_ms, first = samples[0]
        span = stats.now_ms - first_ms
        if span < RATE_MIN_MS:
            return dict.fromkeys(RATE_COUNTERS)
        return {name: max(0, stats.counters.get(name, 0) - first.get(name, 0)) * 1000 / span
                for name in RATE_COUNTERS}


@dataclass(frozen=True, slots=True)
class QueueRow:
    stats: QueueStats
    rates: dict[str, float | None]


async def sync_shards(app: App, queues: Sequence[str], known: dict[str, int]) -> None:
    """Route each queue by the shard count recorded for it in Redis (the
    dashboard is configured with none): one script call per queue. ``known``
    holds every count seen so far, so that syncing one queue keeps the
    others' routing (requests run concurrently)."""
    for q in queues:
        recorded = await app.recorded_shards(q)
        # none recorded yet: keep what the App is configured with (or 1)
        known[q] = recorded or known.get(q, app.shards.count(q))
    if any(app.shards.count(q) != n for q, n in known.items()):
        # the producer (job reads, routing) shares the App's routing
        app.shards = app.producer.shards = Shards(
            app.prefix, {q: n for q, n in known.items() if n > 1})


async def queue_names(app: App, configured: Sequence[str]) -> list[str]:
    """The queues to show: those recorded in Redis, those named on the
    command line, and those the App's registry uses."""
    names = set(configured) | set(await app.recorded_queues())
    if not app.registry.empty:
        names |= set(app.registry.queues())
    return sorted(names)


@dataclass(frozen=True, slots=True)
class Holder:
    raw: str
    expires_in_ms: int
    queue: str | None = None
    job_id: str | None = None
    token: int | None = None
    worker: str | None = None


@dataclass(slots=True)
class LimitRow:
    name: str
    key: str
    capacity: int | None  # known when the App names it (queue_limits, max_concurrent)
    holders: list[Holder] = field(default_factory=list)
    count: int = 0
    evicted: int = 0


def limit_names(app: App, queues: Sequence[str], extra: Sequence[str]) -> dict[str, int | None]:
    """Limit name -> capacity (None when this dashboard does not know it)."""
    names: dict[str, int | None] = {queue_limit_name(q): None for q in queues}
    for q, n in app.queue_limits.items():
        names[queue_limit_name(q)] = n
    for definition in app.registry.all():
        if definition.max_concurrent is not None:
            names[job_limit_name(definition.name)] = definition.max_concurrent
    for name in extra:
        names.setdefault(name, None)
    return names


async def limiter_state(app: App, limiter_prefix: str | None,
                        names: dict[str, int | None]) -> tuple[str, list[LimitRow]]:
    """The Redis limiter's holders of each named limit (each limit is one
    ZSET: holder -> lease expiry on the server clock). Bounded: a limit holds
    at most its capacity, and at most MAX_HOLDERS_SHOWN are read."""
    prefix = limiter_prefix or default_limiter_prefix(app.prefix)
    sec, usec = await app.redis.time()
    now_ms = int(sec) * 1000 + int(usec) // 1000
    rows = []
    for name, capacity in sorted(names.items()):
        lk = limit_keys(prefix, name)
        async with app.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(lk.limit)
            pipe.zrange(lk.limit, 0, MAX_HOLDERS_SHOWN - 1, withscores=True)
            pipe.zcard(lk.evicted)
            count, raw, evicted = await pipe.execute()
        row = LimitRow(name, lk.limit, capacity, count=int(count), evicted=int(evicted))
        row.holders = [_holder(text(member), int(score) - now_ms) for member, score in raw]
        rows.append(row)
    return prefix, rows


def _holder(raw: str, expires_in_ms: int) -> Holder:
    """A holder is ``[prefix, physical queue, job id, token, worker]`` (JSON)."""
    try:
        _prefix, queue, job_id, token, worker = json.loads(raw)
        return Holder(raw, expires_in_ms, str(queue), str(job_id), int(token), str(worker))
    except (ValueError, TypeError):
        return Holder(raw, expires_in_ms)


# -- the job page: sections from a list --------------------------------------


@dataclass(frozen=True, slots=True)
class Section:
    """One section of the job page: its title, its template (under
    templates/sections/), and whether a job has anything to show in it.
    Add a feature's section (progress, checkpoints, a saga) by appending one
    to JOB_SECTIONS; the page renders them in order."""

    key: str
    title: str
    template: str
    shown: Callable[[JobRecord], bool] = lambda record: True


JOB_SECTIONS: list[Section] = [
    Section("summary", "Summary", "sections/summary.html"),
    Section("errors", "Error history", "sections/errors.html",
            lambda r: bool(r.errors or r.error)),
    Section("logs", "Run logs", "sections/logs.html", lambda r: bool(r.logs)),
    # the resilience kit: what the job's runs left for the next attempt
    Section("progress", "Progress", "sections/progress.html", lambda r: r.progress is not None),
    Section("checkpoints", "Checkpoints", "sections/checkpoints.html",
            lambda r: bool(r.checkpoints)),
    Section("saga", "Saga", "sections/saga.html", lambda r: bool(r.saga)),
    Section("payload", "Payload", "sections/payload.html"),
    Section("result", "Result", "sections/result.html",
            lambda r: r.state == JobState.SUCCEEDED),
]


def pretty(value: Any) -> str:
    """A payload or result as indented JSON text (escaped by the template
    like everything else); what JSON cannot hold is shown by repr."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)

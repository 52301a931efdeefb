"""The standalone metrics exporter: the gauges read from Redis (queue depth,
leased, dead, oldest pending age, Redis's own counters, limiter holders),
served by one process so that N workers never report them N times
(``leasequeue exporter``). Needs ``leasequeue[prometheus]``.

It reads Redis in a refresh loop (every ``interval`` seconds, one stats
script per queue shard) and a scrape serves the last snapshot: scrapes never
wait on Redis, and a Redis outage shows as ``leasequeue_exporter_up 0`` with
the last values kept."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from .app import App
from .errors import RedisUnavailable, ScriptError
from .limiter import RedisLimiter
from .log import get_log
from .metrics import prometheus_client
from .models import QueueStats
from .runtime.limits import job_limit_name, queue_limit_name

#: every series the exporter exposes: name -> (type, labels); the alert
#: rules and the README table are checked against it (tests/test_metrics.py)
EXPORTER_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "leasequeue_queue_ready": ("gauge", ("queue",)),
    "leasequeue_queue_scheduled": ("gauge", ("queue",)),
    "leasequeue_queue_leased": ("gauge", ("queue",)),
    "leasequeue_queue_dead": ("gauge", ("queue",)),
    "leasequeue_queue_retained": ("gauge", ("queue",)),
    "leasequeue_queue_oldest_ready_age_seconds": ("gauge", ("queue",)),
    "leasequeue_queue_paused": ("gauge", ("queue",)),
    "leasequeue_queue_events_total": ("counter", ("queue", "event")),
    "leasequeue_limiter_holders": ("gauge", ("limit",)),
    "leasequeue_limiter_limit": ("gauge", ("limit",)),
    "leasequeue_breaker_state": ("gauge", ("breaker",)),
    "leasequeue_exporter_up": ("gauge", ()),
    "leasequeue_exporter_last_refresh_timestamp_seconds": ("gauge", ()),
}
_GAUGES = ("ready", "scheduled", "leased", "dead", "retained")
BREAKER_STATES = {"closed": 0, "half-open": 1, "open": 2}  # leasequeue_breaker_state


@dataclass(slots=True)
class Snapshot:
    queues: list[QueueStats] = field(default_factory=list)
    limits: list[tuple[str, int, int]] = field(default_factory=list)  # (name, holders, limit)
    breakers: list[tuple[str, str]] = field(default_factory=list)  # (name, state)
    up: bool = False
    at: float = 0.0  # time.time() of the last good refresh


class QueueCollector:
    """A prometheus_client custom collector serving the last snapshot."""

    def __init__(self) -> None:
        self.snapshot = Snapshot()

    def describe(self) -> list[Any]:
        return []  # no collect() at registration time

    def collect(self) -> Iterator[Any]:
        prometheus_client()  # the ConfigError naming the extra when it is missing
        from prometheus_client.core import CounterMetricFamily as counter
        from prometheus_client.core import GaugeMetricFamily as gauge
        snap = self.snapshot
        families = {name: gauge(f"leasequeue_queue_{name}", f"Jobs {name} (read from Redis)",
                                labels=["queue"]) for name in _GAUGES}
        age = gauge("leasequeue_queue_oldest_ready_age_seconds",
                    "Age of the oldest ready job (0: none ready)", labels=["queue"])
        paused = gauge("leasequeue_queue_paused", "1 while the queue is paused", labels=["queue"])
        events = counter("leasequeue_queue_events",
                         "The queue's counters kept in Redis (all processes)",
                         labels=["queue", "event"])
        for stats in snap.queues:
            for name in _GAUGES:
                families[name].add_metric([stats.queue], getattr(stats, name))
            age.add_metric([stats.queue], (stats.oldest_ready_age_ms or 0) / 1000)
            paused.add_metric([stats.queue], 1 if stats.paused else 0)
            for event, value in sorted(stats.counters.items()):
                if event != "seq":  # the FIFO sequence, not an event count
                    events.add_metric([stats.queue, event], value)
        yield from families.values()
        yield from (age, paused, events)
        holders = gauge("leasequeue_limiter_holders", "Slots held now (Redis limiter)",
                        labels=["limit"])
        limit = gauge("leasequeue_limiter_limit", "The limit's size", labels=["limit"])
        for name, held, size in snap.limits:
            holders.add_metric([name], held)
            limit.add_metric([name], size)
        yield holders
        yield limit
        breaker = gauge("leasequeue_breaker_state",
                        "A circuit breaker's state: 0 closed, 1 half-open, 2 open",
                        labels=["breaker"])
        for name, state in snap.breakers:
            breaker.add_metric([name], BREAKER_STATES.get(state, 2))
        yield breaker
        yield gauge("leasequeue_exporter_up", "1 when the last refresh read Redis",
                    value=1 if snap.up else 0)
        yield gauge("leasequeue_exporter_last_refresh_timestamp_seconds",
                    "Unix time of the last good refresh", value=snap.at)


def limits_of(app: App) -> list[tuple[str, int]]:
    """The limits an App declares: (limit name, size)."""
    out = [(queue_limit_name(q), n) for q, n in sorted(app.queue_limits.items())]
    out += [(job_limit_name(d.name), d.max_concurrent) for d in app.registry.all()
            if d.max_concurrent]
    return out


class Exporter:
    def __init__(self, app: App, queues: Sequence[str], interval: float = 5.0) -> None:
        self.app = app
        self.queues = list(queues)
        self.interval = interval
        self.collector = QueueCollector()
        self.refreshed = anyio.Event()  # set after the first refresh (good or not)
        self._log = get_log("exporter")

    async def refresh(self) -> None:
        snap = self.collector.snapshot
        try:
            queues = [await self.app.stats(q) for q in self.queues]
            limits = []
            if isinstance(self.app.limiter, RedisLimiter):
                for name, size in limits_of(self.app):
                    limits.append((name, await self.app.limiter.holders(name), size))
            # every breaker of the limiter prefix, declared here or recorded by any service
            breakers = [(b.name, b.state) for b in await self.app.breaker_states()]
        except (RedisUnavailable, ScriptError) as exc:
            self._log.warning("refresh failed; serving the last values", error=str(exc))
            snap.up = False
            return
        self.collector.snapshot = Snapshot(queues, limits, breakers, True, time.time())

    async def run(self) -> None:
        while True:
            await self.refresh()
            self.refreshed.set()
            await anyio.sleep(self.interval)


async def run_exporter(app: App, queues: Sequence[str], port: int, addr: str = "0.0.0.0",
                       interval: float = 5.0) -> None:
    """Serve the exporter's metrics on ``addr:port`` until cancelled."""
    pc = prometheus_client()
    exporter = Exporter(app, queues, interval)
    registry = pc.CollectorRegistry()
    registry.register(exporter.collector)
    server, thread = pc.start_http_server(port, addr, registry=registry)
    get_log("exporter").info("exporter serving", port=server.server_port, queues=queues,
                             prefix=app.prefix, interval_s=interval)
    try:
        await exporter.run()
    finally:
        server.shutdown()
        thread.join(5)

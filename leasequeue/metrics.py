"""Prometheus metrics of a worker (or producer) process, as a Hooks subclass:
counters and histograms of what this process did, per queue and job name.
Needs the optional extra ``leasequeue[prometheus]`` (prometheus-client),
imported only when PrometheusHooks is built. It never reads Redis: the
queue-wide gauges come from the standalone exporter (leasequeue.exporter).

Aggregation rule: every series here counts what one process did, so the sum
over processes (``sum by (queue, job) (rate(...))``) is the cluster's total;
no series is read from Redis, so N workers never count a job N times."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Any

from .errors import ConfigError
from .hooks import EnqueueInfo, Hooks, RunEnd, RunInfo, Settled
from .models import EnqueuedJob, ReapOutcome
from .store.shards import logical

# seconds: from a few ms (a hot queue) to an hour (a backlog, a long job)
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   300.0, 900.0, 3600.0)

#: every series a PrometheusHooks exposes: name -> (type, labels). The alert
#: rules and the README table are checked against this (tests/test_metrics.py).
WORKER_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "leasequeue_jobs_enqueued_total": ("counter", ("queue", "job")),
    "leasequeue_runs_started_total": ("counter", ("queue", "job")),
    "leasequeue_runs_succeeded_total": ("counter", ("queue", "job")),
    "leasequeue_runs_retried_total": ("counter", ("queue", "job", "kind")),
    "leasequeue_jobs_dead_total": ("counter", ("queue", "job", "reason")),
    "leasequeue_runs_canceled_total": ("counter", ("queue", "job")),
    "leasequeue_runs_skipped_total": ("counter", ("queue", "job")),
    "leasequeue_runs_released_total": ("counter", ("queue", "job")),
    "leasequeue_runs_lost_total": ("counter", ("queue", "job")),
    "leasequeue_leases_reaped_total": ("counter", ("queue", "outcome")),
    "leasequeue_job_wait_seconds": ("histogram", ("queue", "job")),
    "leasequeue_job_run_seconds": ("histogram", ("queue", "job")),
}


def prometheus_client() -> Any:
    """The prometheus_client module, or a ConfigError naming the extra."""
    try:
        import prometheus_client as pc
    except ImportError as exc:
        raise ConfigError("Prometheus metrics need prometheus-client: "
                          "pip install 'leasequeue[prometheus]'") from exc
    return pc


class _Histogram:
    """Per-bucket counts (not cumulative), a sum; cumulated when collected."""

    __slots__ = ("buckets", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # the last one is +Inf
        self.sum = 0.0


class _Series:
    """What one process counted for one (queue, job): plain ints, changed on
    the event loop only and read by the scrape thread (an int read is atomic
    under the GIL)."""

    __slots__ = ("canceled", "dead", "enqueued", "infra", "lost", "released", "run",
                 "skipped", "started", "succeeded", "wait", "work")

    def __init__(self, size: int) -> None:
        self.enqueued = self.started = self.succeeded = self.canceled = self.skipped = 0
        self.released = self.lost = self.work = self.infra = 0
        self.dead: dict[str, int] = {}
        self.wait = _Histogram(size)
        self.run = _Histogram(size)


# series of a _Series: (metric, help, attribute)
_COUNTERS = (
    ("leasequeue_jobs_enqueued_total", "Jobs this process enqueued (a job_id hit is not counted)",
     "enqueued"),
    ("leasequeue_runs_started_total", "Runs started by this worker", "started"),
    ("leasequeue_runs_succeeded_total", "Runs that succeeded", "succeeded"),
    ("leasequeue_runs_canceled_total", "Runs ended canceled", "canceled"),
    ("leasequeue_runs_skipped_total", "Runs skipped: no limiter slot (on_conflict=skip)",
     "skipped"),
    ("leasequeue_runs_released_total", "Runs returned to the queue with no attempt spent",
     "released"),
    ("leasequeue_runs_lost_total", "Runs whose lease was lost: their result was discarded",
     "lost"),
)


class PrometheusHooks(Hooks):
    """Add to an App (``app.add_hook(PrometheusHooks())``) and serve the
    registry (``leasequeue.metrics.serve(port)``, or ``leasequeue worker
    --metrics-port``). It registers itself as a custom collector: a run costs
    a few int increments and a bisect per histogram here, not a lock per
    series (benchmarks/hooks_cost.py measures it)."""

    def __init__(self, registry: Any = None, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        pc = prometheus_client()
        from prometheus_client.utils import floatToGoString

        self.registry = registry if registry is not None else pc.REGISTRY
        self._bounds = sorted(float(b) for b in buckets if b != float("inf"))
        go_float: Any = floatToGoString  # the `le` text prometheus_client itself writes
        self._les = [*(str(go_float(b)) for b in self._bounds), "+Inf"]
        self._series: dict[tuple[str, str], _Series] = {}
        self._reaped: dict[tuple[str, str], int] = {}
        self.registry.register(self)

    def _of(self, queue: str, job: str) -> _Series:
        series = self._series.get((queue, job))
        if series is None:
            series = self._series[(queue, job)] = _Series(len(self._bounds) + 1)
        return series

    def _observe(self, h: _Histogram, value: float) -> None:
        h.buckets[bisect_left(self._bounds, value)] += 1
        h.sum += value

    # -- hooks ---------------------------------------------------------------------

    def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
        if result is not None and result.created:
            self._of(result.queue, result.name).enqueued += 1

    def before_run(self, run: RunInfo) -> None:
        series = self._of(run.queue, run.name)
        series.started += 1
        if run.wait_seconds is not None:
            self._observe(series.wait, run.wait_seconds)

    def on_settled(self, run: RunInfo, settled: Settled) -> None:
        series = self._of(run.queue, run.name)
        if run.run_seconds is not None:
            self._observe(series.run, run.run_seconds)
        end = settled.end
        if end is RunEnd.SUCCEEDED:
            series.succeeded += 1
        elif end is RunEnd.RETRIED:
            if settled.kind == "infra":
                series.infra += 1
            else:
                series.work += 1
        elif end is RunEnd.DEAD:
            series.dead[settled.reason] = series.dead.get(settled.reason, 0) + 1
        elif end is RunEnd.CANCELED:
            series.canceled += 1
        elif end is RunEnd.SKIPPED:
            series.skipped += 1
        elif end is RunEnd.RELEASED:
            series.released += 1
        else:
            series.lost += 1

    def on_reaped(self, queue: str, outcome: ReapOutcome) -> None:
        for what, n in (("requeued", outcome.requeued), ("dead", outcome.dead),
                        ("canceled", outcome.canceled)):
            if n:
                key = (logical(queue), what)
                self._reaped[key] = self._reaped.get(key, 0) + n

    # -- the collector (called by the scrape thread) -------------------------------------

    def describe(self) -> list[Any]:
        return list(self._families([]))

    def collect(self) -> list[Any]:
        return list(self._families(list(self._series.items())))

    def _families(self, items: list[tuple[tuple[str, str], _Series]]) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        qj = ["queue", "job"]
        for name, doc, attr in _COUNTERS:
            family = CounterMetricFamily(name, doc, labels=qj)
            for labels, series in items:
                family.add_metric(labels, getattr(series, attr))
            yield family
        retried = CounterMetricFamily("leasequeue_runs_retried_total", "Runs that failed and "
                                      "will be retried, by kind (work | infra)",
                                      labels=[*qj, "kind"])
        dead = CounterMetricFamily("leasequeue_jobs_dead_total", "Jobs dead-lettered, by reason",
                                   labels=[*qj, "reason"])
        for (queue, job), series in items:
            retried.add_metric([queue, job, "work"], series.work)
            retried.add_metric([queue, job, "infra"], series.infra)
            for reason, n in list(series.dead.items()):
                dead.add_metric([queue, job, reason], n)
        yield retried
        yield dead
        reaped = CounterMetricFamily("leasequeue_leases_reaped_total", "Expired leases this "
                                     "worker's reaper handed back, by outcome",
                                     labels=["queue", "outcome"])
        for (queue, what), n in list(self._reaped.items()):
            reaped.add_metric([queue, what], n)
        yield reaped
        for name, doc, attr in (
                ("leasequeue_job_wait_seconds",
                 "Enqueue to start of a job's first run (includes a delay)", "wait"),
                ("leasequeue_job_run_seconds", "Handler wall time of a run", "run")):
            hist = HistogramMetricFamily(name, doc, labels=qj)
            for labels, series in items:
                h: _Histogram = getattr(series, attr)
                counts, total = list(h.buckets), h.sum
                hist.add_metric(labels, list(zip(self._les, accumulate(counts), strict=True)),
                                total)
            yield hist


def serve(port: int, addr: str = "0.0.0.0", registry: Any = None) -> int:
    """Serve a registry over HTTP in a background thread; returns the port
    (pass 0 for a free one)."""
    pc = prometheus_client()
    server, _thread = pc.start_http_server(port, addr,
                                           registry=registry if registry is not None
                                           else pc.REGISTRY)
    return int(server.server_port)

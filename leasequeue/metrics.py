"""Prometheus metrics of a worker (or producer) process, as a Hooks subclass:
counters and histograms of what this process did, per queue and job name.
Needs the optional extra ``leasequeue[prometheus]`` (prometheus-client),
imported only when PrometheusHooks is built. It never reads Redis: the
queue-wide gauges come from the standalone exporter (leasequeue.exporter).

Aggregation rule: every series here counts what one process did, so the sum
over processes (``sum by (queue, job) (rate(...))``) is the cluster's total;
no series is read from Redis, so N workers never count a job N times."""

from __future__ import annotations

from collections.abc import Sequence
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


class _Series:
    """The children of one (queue, job): looked up once, so a run costs a few
    attribute reads and increments, not a label lookup per metric."""

    __slots__ = ("canceled", "dead", "enqueued", "lost", "released", "retried", "run",
                 "skipped", "started", "succeeded", "wait")

    def __init__(self, m: PrometheusHooks, queue: str, job: str) -> None:
        self.enqueued = m.enqueued.labels(queue, job)
        self.started = m.started.labels(queue, job)
        self.succeeded = m.succeeded.labels(queue, job)
        self.canceled = m.canceled.labels(queue, job)
        self.skipped = m.skipped.labels(queue, job)
        self.released = m.released.labels(queue, job)
        self.lost = m.lost.labels(queue, job)
        self.wait = m.wait.labels(queue, job)
        self.run = m.run.labels(queue, job)
        self.retried = {kind: m.retried.labels(queue, job, kind) for kind in ("work", "infra")}
        self.dead: dict[str, Any] = {}


class PrometheusHooks(Hooks):
    """Add to an App (``app.add_hook(PrometheusHooks())``) and serve the
    registry (``prometheus_client.start_http_server``, or
    ``leasequeue worker --metrics-port``)."""

    def __init__(self, registry: Any = None, buckets: Sequence[float] = DEFAULT_BUCKETS) -> None:
        pc = prometheus_client()
        self.registry = registry if registry is not None else pc.REGISTRY
        r, qj = self.registry, ("queue", "job")

        def counter(name: str, doc: str, labels: tuple[str, ...] = qj) -> Any:
            return pc.Counter(name.removesuffix("_total"), doc, labels, registry=r)

        self.enqueued = counter("leasequeue_jobs_enqueued_total",
                                "Jobs this process enqueued (a job_id hit is not counted)")
        self.started = counter("leasequeue_runs_started_total", "Runs started by this worker")
        self.succeeded = counter("leasequeue_runs_succeeded_total", "Runs that succeeded")
        self.retried = counter("leasequeue_runs_retried_total",
                               "Runs that failed and will be retried, by kind (work | infra)",
                               ("queue", "job", "kind"))
        self.dead_family = counter("leasequeue_jobs_dead_total", "Jobs dead-lettered, by reason",
                                   ("queue", "job", "reason"))
        self.canceled = counter("leasequeue_runs_canceled_total", "Runs ended canceled")
        self.skipped = counter("leasequeue_runs_skipped_total",
                               "Runs skipped: no limiter slot (on_conflict=skip)")
        self.released = counter("leasequeue_runs_released_total",
                                "Runs returned to the queue with no attempt spent")
        self.lost = counter("leasequeue_runs_lost_total",
                            "Runs whose lease was lost: their result was discarded")
        self.reaped = counter("leasequeue_leases_reaped_total",
                              "Expired leases this worker's reaper handed back, by outcome",
                              ("queue", "outcome"))
        self.wait = pc.Histogram("leasequeue_job_wait_seconds",
                                 "Enqueue to start of a job's first run (includes a delay)",
                                 qj, buckets=buckets, registry=r)
        self.run = pc.Histogram("leasequeue_job_run_seconds", "Handler wall time of a run",
                                qj, buckets=buckets, registry=r)
        self._series: dict[tuple[str, str], _Series] = {}

    def _of(self, queue: str, job: str) -> _Series:
        series = self._series.get((queue, job))
        if series is None:
            series = self._series[(queue, job)] = _Series(self, queue, job)
        return series

    def after_enqueue(self, job: EnqueueInfo, result: EnqueuedJob | None) -> None:
        if result is not None and result.created:
            self._of(result.queue, result.name).enqueued.inc()

    def before_run(self, run: RunInfo) -> None:
        series = self._of(run.queue, run.name)
        series.started.inc()
        if run.wait_seconds is not None:
            series.wait.observe(run.wait_seconds)

    def on_settled(self, run: RunInfo, settled: Settled) -> None:
        series = self._of(run.queue, run.name)
        if run.run_seconds is not None:
            series.run.observe(run.run_seconds)
        end = settled.end
        if end is RunEnd.SUCCEEDED:
            series.succeeded.inc()
        elif end is RunEnd.RETRIED:
            series.retried[settled.kind if settled.kind == "infra" else "work"].inc()
        elif end is RunEnd.DEAD:
            child = series.dead.get(settled.reason)
            if child is None:
                child = series.dead[settled.reason] = self.dead_family.labels(
                    run.queue, run.name, settled.reason)
            child.inc()
        elif end is RunEnd.CANCELED:
            series.canceled.inc()
        elif end is RunEnd.SKIPPED:
            series.skipped.inc()
        elif end is RunEnd.RELEASED:
            series.released.inc()
        else:
            series.lost.inc()

    def on_reaped(self, queue: str, outcome: ReapOutcome) -> None:
        for what, n in (("requeued", outcome.requeued), ("dead", outcome.dead),
                        ("canceled", outcome.canceled)):
            if n:
                self.reaped.labels(logical(queue), what).inc(n)


def serve(port: int, addr: str = "0.0.0.0", registry: Any = None) -> int:
    """Serve a registry over HTTP in a background thread; returns the port
    (pass 0 for a free one)."""
    pc = prometheus_client()
    server, _thread = pc.start_http_server(port, addr,
                                           registry=registry if registry is not None
                                           else pc.REGISTRY)
    return int(server.server_port)

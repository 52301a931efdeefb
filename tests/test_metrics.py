"""Prometheus metrics: the worker's counters and histograms (PrometheusHooks),
the standalone exporter's Redis-read gauges, both served by the CLI and
scraped over HTTP, the aggregation rule across two worker processes, and the
shipped alert rules checked against the metrics that exist."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

import leasequeue.metrics
from leasequeue import App, Context, RedisLimiter, TransientError, fixed
from leasequeue.errors import ConfigError
from leasequeue.exporter import EXPORTER_METRICS, Exporter
from leasequeue.metrics import WORKER_METRICS, PrometheusHooks
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess, env_with_path
from tests.helpers import eventually, expire_lease, worker_running

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALL_METRICS = {**WORKER_METRICS, **EXPORTER_METRICS}


async def state(app: App, job_id: str, *states: str) -> bool:
    return (await app.get_job(job_id)).state in states


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


@pytest.mark.anyio
async def test_worker_counters_and_histograms(real_app: App) -> None:
    app = real_app
    registry = CollectorRegistry()
    app.add_hook(PrometheusHooks(registry))
    runs = 0

    @app.job
    async def ok(ctx: Context) -> None:
        return None

    @app.job(max_attempts=2, backoff=fixed(0))
    async def broken(ctx: Context) -> None:
        raise ValueError("no")

    @app.job(infra_backoff=fixed(0))
    async def flaky(ctx: Context) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise TransientError("db down")

    for n in range(3):
        await app.enqueue("ok", job_id=f"ok{n}")
    await app.enqueue("ok", job_id="ok0")  # a job_id hit: not a new job
    await app.enqueue("broken", job_id="b")
    await app.enqueue("flaky", job_id="f")
    # a lease of a worker that died: reaped by ours
    await app.enqueue("ok", job_id="ghost")
    await app.scripts.claim(app.keys("default"), 1, 60_000, "gone", 1, "c1")
    await expire_lease(app, "default", "ok0")
    async with worker_running(app, reap_interval=0.05):
        for job_id in ("ok0", "ok1", "ok2", "f", "ghost"):
            await eventually(lambda j=job_id: state(app, j, "succeeded"), what=job_id)
        await eventually(lambda: state(app, "b", "dead"))
        await eventually(lambda: sample(registry, "leasequeue_jobs_dead_total", queue="default",
                                        job="broken", reason="max-attempts") == 1)
        await eventually(lambda: sample(registry, "leasequeue_runs_succeeded_total",
                                        queue="default", job="ok") == 4)
    oks = {"queue": "default", "job": "ok"}
    assert sample(registry, "leasequeue_jobs_enqueued_total", **oks) == 4  # ok0-2, ghost
    assert sample(registry, "leasequeue_runs_started_total", **oks) == 4
    assert sample(registry, "leasequeue_runs_retried_total", queue="default", job="broken",
                  kind="work") == 1
    assert sample(registry, "leasequeue_runs_retried_total", queue="default", job="flaky",
                  kind="infra") == 1
    assert sample(registry, "leasequeue_runs_succeeded_total", queue="default",
                  job="flaky") == 1
    assert sample(registry, "leasequeue_leases_reaped_total", queue="default",
                  outcome="requeued") == 1
    assert sample(registry, "leasequeue_job_run_seconds_count", **oks) == 4
    # wait time: first runs only (the reaped one had an earlier run)
    assert sample(registry, "leasequeue_job_wait_seconds_count", **oks) == 3
    assert sample(registry, "leasequeue_job_wait_seconds_sum", **oks) < 30


@pytest.mark.anyio
async def test_skipped_released_and_canceled_are_counted(real_app: App) -> None:
    app = real_app
    registry = CollectorRegistry()
    app.add_hook(PrometheusHooks(registry))
    release = anyio.Event()

    @app.job(max_concurrent=1, on_conflict="skip")
    async def report(ctx: Context) -> None:
        await release.wait()

    @app.job
    async def long(ctx: Context) -> None:
        await anyio.sleep(30)

    await app.enqueue("report", job_id="r1")
    await app.enqueue("long", job_id="l1")
    async with worker_running(app):
        await eventually(lambda: state(app, "r1", "leased"))
        await app.enqueue("report", job_id="r2")
        await eventually(lambda: state(app, "r2", "skipped"))
        await eventually(lambda: sample(registry, "leasequeue_runs_started_total",
                                        queue="default", job="long") == 1)
        await app.cancel("l1")
        await eventually(lambda: state(app, "l1", "canceled"))
        release.set()
        await eventually(lambda: sample(registry, "leasequeue_runs_canceled_total",
                                        queue="default", job="long") == 1)
    assert sample(registry, "leasequeue_runs_skipped_total", queue="default", job="report") == 1


@pytest.mark.anyio
async def test_exporter_reads_the_queue_gauges_from_redis(real_app: App) -> None:
    app = real_app
    app.limiter = RedisLimiter()
    app.limiter.bind(app.redis, app.url, app.prefix)
    app.queue_limits["default"] = 3

    @app.job(max_concurrent=2)
    async def work(ctx: Context) -> None:
        return None

    for n in range(4):
        await app.enqueue("work", job_id=f"w{n}")
    await app.enqueue("work", job_id="later", delay=3600)
    await app.pause("default")
    assert (await app.limiter.acquire("job.work", 2, "h1", False)).taken
    app.breaker("payments-api")
    await app.force_breaker("payments-api", "open")
    app.breaker("search-api")
    exporter = Exporter(app, ["default"])
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    await exporter.refresh()
    q = {"queue": "default"}
    assert sample(registry, "leasequeue_queue_ready", **q) == 4
    assert sample(registry, "leasequeue_queue_scheduled", **q) == 1
    assert sample(registry, "leasequeue_queue_paused", **q) == 1
    assert 0 <= sample(registry, "leasequeue_queue_oldest_ready_age_seconds", **q) < 60
    assert sample(registry, "leasequeue_queue_events_total", queue="default",
                  event="enqueued") == 5
    assert sample(registry, "leasequeue_limiter_holders", limit="job.work") == 1
    assert sample(registry, "leasequeue_limiter_limit", limit="job.work") == 2
    assert sample(registry, "leasequeue_limiter_limit", limit="queue.default") == 3
    assert sample(registry, "leasequeue_breaker_state", breaker="payments-api") == 2
    assert sample(registry, "leasequeue_breaker_state", breaker="search-api") == 0
    assert sample(registry, "leasequeue_exporter_up") == 1
    assert sample(registry, "leasequeue_exporter_last_refresh_timestamp_seconds") > 0
    exposed = {m.name for m in registry.collect()}
    assert {_family(n) for n in EXPORTER_METRICS} == exposed


@pytest.mark.anyio
async def test_exporter_keeps_serving_when_redis_is_unreachable(prefix: str) -> None:
    app = App(f"redis://127.0.0.1:{_free_port()}/0", prefix=prefix)
    exporter = Exporter(app, ["default"])
    registry = CollectorRegistry()
    registry.register(exporter.collector)
    await exporter.refresh()
    assert sample(registry, "leasequeue_exporter_up") == 0
    await app.close()


def _family(name: str) -> str:
    return name.removesuffix("_total")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(scraped: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def _scrape_or_none(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        return _scrape(port)
    except OSError:
        return None


def test_two_worker_processes_and_one_exporter_over_http(
        redis_server: RedisProcess, prefix: str, tmp_path: Path) -> None:
    """The aggregation rule: each worker process counts its own runs (their
    sum is every run, each once); the queue gauges come from one exporter."""
    from tests.conftest import wait_for

    async def enqueue() -> None:
        app = App(redis_server.url, prefix=prefix)
        for n in range(40):
            await app.enqueue("slow", {"seconds": 0}, job_id=f"j{n}", queue="default")
        await app.close()

    anyio.run(enqueue)
    ports = [_free_port(), _free_port()]
    exporter_port = _free_port()
    env = env_with_path()
    env.update(LQ_URL=redis_server.url, LQ_PREFIX=prefix)
    exporter = subprocess.Popen(
        [sys.executable, "-m", "leasequeue.cli", "exporter", "--url", redis_server.url,
         "--prefix", prefix, "--queue", "default", "--port", str(exporter_port),
         "--interval", "0.2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with WorkerProcs(redis_server.url, prefix, tmp_path) as procs:
            for i, port in enumerate(ports):
                procs.start(f"w{i}", "--metrics-port", str(port), "--concurrency", "2")

            def total() -> float:
                scraped = [_scrape_or_none(p) for p in ports]
                if any(s is None for s in scraped):
                    return 0
                return sum(_value(s, "leasequeue_runs_succeeded_total", queue="default",
                                  job="slow") for s in scraped if s is not None)

            wait_for(lambda: total() == 40, timeout=30, what="40 runs counted over 2 workers")
            assert total() == 40  # each run counted once, by the process that ran it
            wait_for(lambda: (s := _scrape_or_none(exporter_port)) is not None and _value(
                s, "leasequeue_queue_events_total", queue="default", event="succeeded") == 40,
                timeout=30, what="the exporter's succeeded counter")
            gauges = _scrape(exporter_port)
            assert _value(gauges, "leasequeue_queue_ready", queue="default") == 0
            assert _value(gauges, "leasequeue_exporter_up") == 1
            for port in ports:  # workers serve no Redis-read gauges: nothing double counted
                names = {name for name, _ in _scrape(port)}
                assert not any(n.startswith("leasequeue_queue_") for n in names)
    finally:
        exporter.terminate()
        exporter.wait(10)


def test_metrics_need_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigError, match=r"leasequeue\[prometheus\]"):
        leasequeue.metrics.PrometheusHooks()


# -- the alert rules ------------------------------------------------------------------

METRIC = re.compile(r"\bleasequeue_[a-z_]+\b")


def _base(name: str) -> str:
    """A histogram's series name back to its family's (the name we list)."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in ALL_METRICS:
            return name.removesuffix(suffix)
    return name


def test_alert_rules_use_only_metrics_leasequeue_exposes() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for group in doc["groups"] for r in group["rules"]]
    assert len(rules) >= 8
    used: set[str] = set()
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["alert"].startswith("Leasequeue") and rule["expr"].strip()
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        used |= {_base(m) for m in METRIC.findall(rule["expr"])}
    unknown = used - set(ALL_METRICS)
    assert not unknown, f"alert rules use metrics nobody exposes: {unknown}"
    # the rules cover the worker side and the exporter side
    assert used & set(WORKER_METRICS) and used & set(EXPORTER_METRICS)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_alert_rules_pass_promtool() -> None:
    out = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_readme_metric_table_is_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Metrics, tracing and hooks", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(leasequeue_[a-z_]+)`", section, re.M))
    assert listed == set(ALL_METRICS)


def test_histogram_buckets_are_cumulative_and_match_the_count() -> None:
    from leasequeue.hooks import SETTLED, RunEnd, RunInfo

    registry = CollectorRegistry()
    hooks = PrometheusHooks(registry, buckets=(0.1, 1.0))
    for wait in (0.05, 0.1, 0.5, 7.0):
        info = RunInfo("j", "send", "q", 1, 1, "w", "", "", 0, True, {}, wait_seconds=wait,
                       run_seconds=wait)
        hooks.before_run(info)
        hooks.on_settled(info, SETTLED[RunEnd.SUCCEEDED])
    labels = {"queue": "q", "job": "send"}
    for name in ("leasequeue_job_wait_seconds", "leasequeue_job_run_seconds"):
        assert [sample(registry, f"{name}_bucket", **labels, le=le)
                for le in ("0.1", "1.0", "+Inf")] == [2, 3, 4]  # le: less than or equal
        assert sample(registry, f"{name}_count", **labels) == 4
        assert sample(registry, f"{name}_sum", **labels) == pytest.approx(7.65)
    assert sample(registry, "leasequeue_runs_succeeded_total", **labels) == 4
    with pytest.raises(ValueError, match="Duplicated timeseries"):  # one per registry
        PrometheusHooks(registry)


def test_the_core_imports_neither_prometheus_nor_opentelemetry() -> None:
    """The integrations load only when used. (redis-py itself imports
    opentelemetry when it is installed, so the check is on our modules.)"""
    code = ("import sys, leasequeue, leasequeue.cli, leasequeue.worker; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prometheus_client' "
            "or m in ('leasequeue.metrics', 'leasequeue.exporter', 'leasequeue.tracing')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT, env={**env_with_path(), "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

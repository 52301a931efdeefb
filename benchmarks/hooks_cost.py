"""What metrics and tracing hooks cost on the hot path: drain N no-op jobs
with an in-process worker, with no hooks, with PrometheusHooks, and with
PrometheusHooks + OpenTelemetryHooks (an SDK TracerProvider with no
exporter: span creation, attributes and context, not the export), modes
alternating per repetition on one redis-server. Reports the median drain
rate and the process CPU per job (steadier than a rate on a busy machine).

  python benchmarks/hooks_cost.py [--jobs 20000] [--reps 3] [--concurrency 50]

Needs the dev extra (prometheus-client, opentelemetry-sdk) and redis-server."""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from typing import Any

import anyio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import RedisServer

from leasequeue import App, Context, JobRequest, Worker

MODES = ("off", "prometheus", "prometheus+otel")


class Warnings(logging.Handler):
    """Counts the worker's warning lines (not printed: a drain is measured)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


WARNINGS = Warnings()


def hooks_for(mode: str) -> list[Any]:
    if mode == "off":
        return []
    from prometheus_client import CollectorRegistry

    from leasequeue.metrics import PrometheusHooks

    hooks: list[Any] = [PrometheusHooks(CollectorRegistry())]
    if mode == "prometheus+otel":
        from opentelemetry.sdk.trace import TracerProvider

        from leasequeue.tracing import OpenTelemetryHooks

        hooks.append(OpenTelemetryHooks(TracerProvider()))
    return hooks


async def drain_once(url: str, prefix: str, mode: str, jobs: int, concurrency: int
                     ) -> dict[str, float]:
    app = App(url, prefix=prefix)

    @app.job
    async def noop(ctx: Context) -> None:
        return None

    await app.enqueue_many(JobRequest("noop") for _ in range(jobs))  # enqueued without hooks
    for hook in hooks_for(mode):
        app.add_hook(hook)
    worker = Worker(app, concurrency=concurrency, lease=30)
    warned = WARNINGS.count
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        while True:
            stats = await app.stats("default")
            if stats.ready == 0 and stats.leased == 0:
                break
            await anyio.sleep(0.02)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        worker.stop()
    done = (await app.stats("default")).counters.get("succeeded", 0)
    await app.close()
    assert done == jobs, f"{mode}: {done} of {jobs} succeeded"
    return {"jobs_per_s": jobs / seconds, "cpu_us_per_job": cpu / jobs * 1e6,
            "warnings": WARNINGS.count - warned}


async def main_async(args: argparse.Namespace, url: str) -> None:
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    for rep in range(args.reps):
        for mode in MODES:  # alternating: drift hits every mode alike
            results[mode].append(await drain_once(url, f"hk{rep}{MODES.index(mode)}", mode,
                                                  args.jobs, args.concurrency))
    base = statistics.median(r["cpu_us_per_job"] for r in results["off"])
    for mode in MODES:
        rate = statistics.median(r["jobs_per_s"] for r in results[mode])
        cpu = statistics.median(r["cpu_us_per_job"] for r in results[mode])
        print(json.dumps({"mode": mode, "jobs": args.jobs, "reps": args.reps,
                          "concurrency": args.concurrency, "median_jobs_per_s": round(rate),
                          "median_cpu_us_per_job": round(cpu, 1),
                          "cpu_us_per_job_over_off": round(cpu - base, 1),
                          "warning_lines": [int(r["warnings"]) for r in results[mode]]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=50)
    args = ap.parse_args()
    logger = logging.getLogger("leasequeue")
    logger.addHandler(WARNINGS)
    logger.propagate = False
    with RedisServer() as server:
        anyio.run(main_async, args, server.url)


if __name__ == "__main__":
    main()

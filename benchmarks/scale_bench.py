"""Scale figures for leasequeue (issues 4 and 6), on servers this process starts:

- the Redis limiter: acquire + release latency, p50/p99, one client;
- a max_concurrent=4 job drained by 2 worker processes (the Redis limiter);
- 3 worker processes over 3 queues, and over one queue with 3 shards, on a
  3-master Redis Cluster and on a single Redis, in the same run.

Prints one JSON object per line (see common.emit).
Run: python benchmarks/scale_bench.py [--n 60000] [--limited-n 6000] [--no-cluster]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from common import emit, emit_error, latency_summary, spawn, stop  # noqa: E402
from redis_server import RedisServer  # noqa: E402

from leasequeue import App, JobRequest, RedisLimiter  # noqa: E402


async def limiter_latency(url: str, n: int) -> dict[str, Any]:
    app = App(url, prefix="scale-lim", limiter=RedisLimiter())
    samples = []
    try:
        for i in range(n):
            t0 = time.perf_counter_ns()
            grant = await app.limiter.acquire("job.bench", 4, f"h{i}", False)
            await app.limiter.release("job.bench", [f"h{i}"])
            samples.append(time.perf_counter_ns() - t0)
            assert grant.taken
    finally:
        await app.close()
    return latency_summary(samples)


async def _enqueue(url: str, prefix: str, jobs: list[JobRequest], shards: int) -> None:
    app = App(url, prefix=prefix, queue_shards={"hot": shards})
    try:
        for start in range(0, len(jobs), 5000):
            await app.enqueue_many(jobs[start:start + 5000])
    finally:
        await app.close()


async def _succeeded(url: str, prefix: str, queues: list[str], shards: int) -> int:
    app = App(url, prefix=prefix, queue_shards={"hot": shards})
    try:
        total = 0
        for q in queues:
            total += (await app.stats(q)).counters.get("succeeded", 0)
        return total
    finally:
        await app.close()


def drain(url: str, prefix: str, jobs: list[JobRequest], queues: list[str], processes: int,
          shards: int = 3, budget: float = 60.0, concurrency: int = 100) -> dict[str, Any]:
    """Enqueue, start `processes` CLI workers, time from the first finished job
    to the last (worker start-up is not counted)."""
    anyio.run(_enqueue, url, prefix, jobs, shards)
    env = {"LQ_URL": url, "LQ_PREFIX": prefix, "LQ_SHARDS": str(shards),
           "PYTHONPATH": str(ROOT) + os.pathsep + str(HERE)}
    queue_flags = [flag for q in queues for flag in ("-q", q)]
    procs = [spawn([sys.executable, "-m", "leasequeue.cli", "--log-level", "warning", "worker",
                    "scale_app:app", "--concurrency", str(concurrency), *queue_flags],
                   f"scale-{prefix}-{k}", env=env) for k in range(processes)]
    try:
        first_t = first_n = None
        deadline = time.monotonic() + budget
        done = 0
        while time.monotonic() < deadline:
            done = anyio.run(_succeeded, url, prefix, queues, shards)
            now = time.monotonic()
            if first_t is None and done > 0:
                first_t, first_n = now, done
            if done >= len(jobs):
                break
            time.sleep(0.05)
        if first_t is None or first_n is None or done <= first_n:
            return {"error": f"only {done} of {len(jobs)} jobs finished in {budget:.0f} s"}
        window = time.monotonic() - first_t
        return {"jobs_per_s": round((done - first_n) / window), "window_s": round(window, 2),
                "jobs": len(jobs), "processes": processes, "concurrency": concurrency,
                "complete": done >= len(jobs)}
    finally:
        for p in procs:
            stop(p)


def spread(n: int, names: list[str], queue_of: dict[str, str]) -> list[JobRequest]:
    return [JobRequest(names[i % len(names)], queue=queue_of[names[i % len(names)]])
            for i in range(n)]


def run(url: str, label: str, n: int) -> None:
    three = ["noop_q0", "noop_q1", "noop_q2"]
    queues = {"noop_q0": "q0", "noop_q1": "q1", "noop_q2": "q2", "noop_hot": "hot"}
    for metric, jobs, consumed in (
        ("three_queues", spread(n, three, queues), ["q0", "q1", "q2"]),
        ("one_queue_three_shards", spread(n, ["noop_hot"], queues), ["hot"]),
    ):
        try:
            emit(metric, target=label,
                 **drain(url, f"scale-{metric}-{time.time_ns()}", jobs, consumed, 3))
        except Exception as exc:  # a failed figure is reported, not dropped
            emit_error(metric, exc)


def main() -> None:
    ap = argparse.ArgumentParser()
    # 60,000 jobs: windows of a couple of seconds at these rates (6,000 gave
    # windows of about 0.2 s, too short to be stable)
    ap.add_argument("--n", type=int, default=60_000)
    ap.add_argument("--limited-n", type=int, default=6_000)
    ap.add_argument("--limiter-n", type=int, default=2000)
    ap.add_argument("--no-cluster", action="store_true")
    args = ap.parse_args()
    with RedisServer() as server:
        emit("limiter_acquire_release", **anyio.run(limiter_latency, server.url, args.limiter_n))
        jobs = [JobRequest("limited", queue="limited") for _ in range(args.limited_n)]
        for concurrency in (4, 100):
            emit("max_concurrent_4_two_processes",
                 **drain(server.url, f"scale-lim-{time.time_ns()}", jobs, ["limited"], 2,
                         concurrency=concurrency))
        run(server.url, "single redis", args.n)
        if not args.no_cluster:
            sys.path.insert(0, str(ROOT / "tests"))
            from tests.harness.cluster_proc import RedisCluster

            cluster = RedisCluster()
            try:
                cluster.start()
                run(cluster.url, "3-master cluster", args.n)
            except Exception as exc:
                emit_error("cluster", exc)
            finally:
                cluster.cleanup()


if __name__ == "__main__":
    main()

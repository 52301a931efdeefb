"""Rate limit figures (issue 15), on a redis-server this process starts:

- accuracy: one Rate(500/s, burst 50) shared by 3 worker processes of 2
  services (two queue prefixes, one limiter prefix) for ~20 s: starts per
  1 s window after the first (target ±3 % of 500), and the most starts in
  any 100 ms / 1 s window against burst + rate x window (over the whole
  run, and after the first second). The workers run 200 jobs first (not
  counted), so that their first starts are not timed late by a cold process
  (imports, connections, script loads);
- fairness: key A with 10,000 queued jobs, B..E with 100 each (enqueued
  after A), each key at 50/s: when B..E finish (their own limit allows 2 s)
  and how much of A had run by then; enqueued by a producer that knows the
  job (each job carries its rate key: claims park A's backlog in Redis), and
  (fairness_unknown) by one that does not (each of A's jobs meets a worker
  once);
- overhead: drain of 20,000 no-op jobs with no limit, and under a rate it
  never reaches (1,000,000/s), by one worker process;
- bullmq: the accuracy row for BullMQ's `limiter {max, duration}` on Node
  (3 worker processes, one queue; benchmarks/node/rate.mjs).

The worker processes run tests/harness/apps/rate_app.py through the CLI.
Prints one JSON object per line (see common.emit).
Run: python benchmarks/rate_bench.py [--seconds 20] [--rate 500] [--sections ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import redis as redis_sync

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from common import emit, emit_error, stop  # noqa: E402
from redis_server import RedisServer  # noqa: E402

from leasequeue import App, Context, JobRequest, Rate  # noqa: E402

APP = "tests.harness.apps.rate_app:app"
US = 1_000_000


def worker(url: str, prefix: str, limiter_prefix: str, worker_id: str, queue: str,
           concurrency: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    full = dict(os.environ, LQ_URL=url, LQ_PREFIX=prefix, LQ_LIMITER_PREFIX=limiter_prefix,
                PYTHONPATH=str(ROOT), **env)
    logs = HERE / "results" / "tmp"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"rate-{worker_id}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "leasequeue.cli", "--log-level", "warning", "worker", APP,
             "--worker-id", worker_id, "--queue", queue, "--concurrency", str(concurrency)],
            env=full, stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))


async def enqueue(url: str, prefix: str, reqs: list[JobRequest],
                  knows: tuple[str, str, Rate] | None = None) -> None:
    """Enqueue through a producer App; ``knows`` = (job, queue, rate): the
    producer declares that job with its rate, as a service that knows the
    job does, and stores each job's park group with it (lua/claim.lua);
    else it does not know the job and stores none."""
    async with App(url, prefix=prefix) as app:
        if knows is not None:
            async def stub(ctx: Context, **payload: Any) -> None: ...
            app.job(name=knows[0], queue=knows[1], rate=knows[2])(stub)
        for start in range(0, len(reqs), 5000):
            await app.enqueue_many(reqs[start:start + 5000])


def wait_until(check: Any, timeout: float, poll: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(poll)
    return False


def most_in_window(starts: list[int], window_us: int) -> int:
    return busiest_window(starts, window_us)[0]


def busiest_window(starts: list[int], window_us: int) -> tuple[int, int]:
    """(the most starts in any window, the start of that window, us)."""
    best, at, j = 0, 0, 0
    for i, s in enumerate(starts):
        while starts[j] <= s - window_us:
            j += 1
        if i - j + 1 > best:
            best, at = i - j + 1, starts[j]
    return best, at


def accuracy(url: str, rate: int, burst: int, seconds: float) -> None:
    client = redis_sync.Redis.from_url(url)
    lp = "bench-acc:shared"
    n_per_service = int(rate * (seconds + 2) / 2) + burst
    env = {"LQ_RATE": str(rate), "LQ_BURST": str(burst)}
    procs = [worker(url, "acc-a", lp, "acc-a1", "rated", 50, env),
             worker(url, "acc-a", lp, "acc-a2", "rated", 50, env),
             worker(url, "acc-b", lp, "acc-b1", "rated", 50, env)]
    key = f"{lp}:test:starts"
    try:
        # warm-up: the workers' first runs (imports, connections, script
        # loads) would time their first starts late; then the count begins
        for p in ("acc-a", "acc-b"):
            anyio.run(enqueue, url, p, [JobRequest("hit", {"i": -i}, queue="rated")
                                        for i in range(1, 101)])
        wait_until(lambda: client.llen(key) >= 200, 30)
        client.delete(key)
        for p in ("acc-a", "acc-b"):
            anyio.run(enqueue, url, p, [JobRequest("hit", {"i": i}, queue="rated")
                                        for i in range(n_per_service)])
        wait_until(lambda: client.llen(key) > 0, 30)
        time.sleep(seconds + 1.5)
    finally:
        for p in procs:
            stop(p)
    starts = sorted(int(x) for x in client.lrange(key, 0, -1))
    t0 = starts[0]
    windows = Counter((s - t0) // US for s in starts)
    full = [windows[w] for w in range(1, int(seconds))]  # whole windows after the first
    dev = [round((n - rate) / rate * 100, 2) for n in full]
    emit("rate_accuracy", rate=rate, burst=burst, processes=3, services=2,
         starts=len(starts), windows=full, deviation_pct_min=min(dev),
         deviation_pct_max=max(dev), within_3pct=all(abs(d) <= 3 for d in dev),
         most_in_100ms=most_in_window(starts, US // 10), bound_100ms=burst + rate // 10,
         most_in_1s=most_in_window(starts, US), bound_1s=burst + rate,
         busiest_1s_starts_at_s=round((busiest_window(starts, US)[1] - t0) / US, 2),
         first_1s_by_100ms=[sum(1 for s in starts if k * US // 10 <= s - t0 < (k + 1) * US // 10)
                            for k in range(12)],
         most_in_1s_after_the_first=most_in_window([s for s in starts if s >= t0 + US], US),
         most_in_100ms_after_the_first=most_in_window([s for s in starts if s >= t0 + US],
                                                      US // 10))
    client.close()


def fairness(url: str, key_rate: int, big: int, small: int, knows: bool) -> None:
    """``knows``: the producer knows the job (its rate key is stored with each
    job, so claims park A's backlog in Redis); else the worker meets each of
    A's jobs once (claimed, its start reserved, released)."""
    client = redis_sync.Redis.from_url(url)
    lp = f"bench-fair-{int(knows)}:shared"
    prefix = f"fair-{int(knows)}"
    reqs = [JobRequest("tenant_hit", {"tenant": "A", "i": i}, queue="tenants")
            for i in range(big)]
    reqs += [JobRequest("tenant_hit", {"tenant": t, "i": i}, queue="tenants")
             for t in "BCDE" for i in range(small)]
    rate = Rate(key_rate, per=1.0, burst=1, key="tenant:{tenant}")  # as rate_app's KEY_RATE
    anyio.run(enqueue, url, prefix, reqs, ("tenant_hit", "tenants", rate) if knows else None)
    key = f"{lp}:test:done"
    started = time.monotonic()
    proc = worker(url, prefix, lp, f"fair-{int(knows)}", "tenants", 50,
                  {"LQ_KEY_RATE": str(key_rate)})

    def small_done() -> bool:
        return sum(1 for x in client.lrange(key, 0, -1) if not x.startswith(b"A ")) >= 4 * small

    try:
        ok = wait_until(small_done, 120, 0.2)
    finally:
        stop(proc)
    rows = [x.decode().split() for x in client.lrange(key, 0, -1)]
    first = min(int(t) for _, t in rows)
    finish = {k: round((max(int(t) for kk, t in rows if kk == k) - first) / US, 2)
              for k in "BCDE" if any(kk == k for kk, _ in rows)}
    emit("rate_fairness", producer_knows_the_job=knows, key_rate=key_rate, big_key_jobs=big,
         small_key_jobs=small,
         small_keys_done=ok, small_key_finish_s=finish,
         own_limit_allows_s=round((small - 1) / key_rate, 2),
         big_key_would_need_s=round(big / key_rate, 1),
         big_key_started_by_then=sum(1 for k, _ in rows if k == "A"),
         wall_s=round(time.monotonic() - started, 1))
    client.close()


def drain(url: str, job: str, queue: str, n: int) -> float:
    prefix = f"drain-{job}-{time.monotonic_ns()}"
    anyio.run(enqueue, url, prefix, [JobRequest(job, {"i": i}, queue=queue) for i in range(n)])
    client = redis_sync.Redis.from_url(url)
    proc = worker(url, prefix, f"{prefix}:limiter", f"drain-{job}", queue, 50, {})
    stats_key = "{" + f"{prefix}:{queue}" + "}:stats"

    def done() -> int:
        return int(client.hget(stats_key, "succeeded") or 0)

    try:
        wait_until(lambda: done() > 0, 30, 0.01)
        t0 = time.monotonic()
        wait_until(lambda: done() >= n, 120, 0.01)
        elapsed = time.monotonic() - t0
    finally:
        stop(proc)
        client.close()
    return elapsed


def overhead(url: str, n: int, reps: int) -> None:
    plain, roomy = [], []
    for _ in range(reps):  # alternated, so load changes hit both alike
        plain.append(drain(url, "plain", "plain", n))
        roomy.append(drain(url, "roomy", "roomy", n))
    best_plain, best_roomy = min(plain), min(roomy)
    emit("rate_overhead", n=n, reps=reps, unlimited_jobs_per_s=round(n / best_plain),
         limit_not_reached_jobs_per_s=round(n / best_roomy),
         slowdown_pct=round((best_roomy / best_plain - 1) * 100, 1),
         unlimited_s=[round(x, 2) for x in plain], limited_s=[round(x, 2) for x in roomy])


def bullmq(url: str, rate: int, seconds: float) -> None:
    """BullMQ's `limiter {max, duration}` on 3 worker processes (one queue),
    the same accuracy figures; needs `cd benchmarks/node && npm install bullmq`."""
    node = HERE / "node"
    if not (node / "node_modules" / "bullmq").is_dir():
        emit("rate_accuracy_bullmq", error="bullmq is not installed in benchmarks/node")
        return
    out = subprocess.run(["node", "rate.mjs", "bench", "--url", url, "--rate", str(rate),
                          "--seconds", str(seconds)], cwd=node, capture_output=True, text=True,
                         timeout=seconds * 4 + 120)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if not line:
        emit("rate_accuracy_bullmq", error=out.stderr[-500:])
        return
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=500)
    ap.add_argument("--burst", type=int, default=50)
    ap.add_argument("--key-rate", type=int, default=50)
    ap.add_argument("--big", type=int, default=10_000)
    ap.add_argument("--small", type=int, default=100)
    ap.add_argument("--drain-n", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sections",
                    default="accuracy,fairness,fairness_unknown,overhead,bullmq")
    args = ap.parse_args()
    with RedisServer() as server:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
        emit("rate_run", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit,
             load_avg=os.getloadavg())
        sections = args.sections.split(",")
        for name, run in (("accuracy", lambda: accuracy(server.url, args.rate, args.burst,
                                                          args.seconds)),
                          ("fairness", lambda: fairness(server.url, args.key_rate, args.big,
                                                        args.small, True)),
                          ("fairness_unknown", lambda: fairness(server.url, args.key_rate,
                                                                args.big, args.small, False)),
                          ("overhead", lambda: overhead(server.url, args.drain_n, args.reps)),
                          ("bullmq", lambda: bullmq(server.url, args.rate, args.seconds))):
            if name in sections:
                try:
                    run()
                except Exception as exc:
                    emit_error(f"rate_{name}", exc)
        emit("rate_run_end", load_avg=os.getloadavg())


if __name__ == "__main__":
    main()

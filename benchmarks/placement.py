"""One enqueue per call by where the client runs: on Redis's CPU or on the
other one. On a quiet 2-CPU VM this column moves between runs by more than
any client's own cost (bee-queue's one per call at 10,000 calls/s in one
harness run and 36,600 in the next), and the scheduler's placement is why:
a client that shares Redis's CPU hands it the CPU at each call, where one
on the other CPU wakes an idle CPU at each call, which on these VMs waits
for the hypervisor. This pins redis-server (this tool's own, on a free
port) to CPU 0 and each producer in turn to CPU 0 ("same CPU") or CPU 1
("other CPU"), alternating the producers and the placements, so that each
peer is measured in both and compared within each.

  python benchmarks/placement.py [--calls 5000] [--rounds 3] [--reps 3]
  python benchmarks/placement.py --what e2s [--reps 5]
  python benchmarks/placement.py client --url U --producer app-asyncio  (run by the tool)

``--what e2s``: the harness's enqueue→start probe (200 probes, the
harness's settings) of leasequeue (lq_bench.py) and bee-queue (node
bee.mjs), each bench process pinned as above with the worker it starts
(a child keeps its parent's CPU): all on Redis's CPU, or both clients on
the other one; p50 and p99 by placement, bee-queue ÷ ours (above 1: ours
is faster).

Needs 2 CPUs and the bee-queue install of benchmarks/node (run.py makes
it). Producers: bee-queue (benchmarks/node/one_call.mjs), leasequeue's App
on asyncio's loop and on uvloop's, SyncApp; each a process of its own,
warmed by 200 calls, then rounds of ``calls`` calls (calls/s per round)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import cpu_model
from redis_server import RedisServer

HERE = Path(__file__).resolve().parent
PLACEMENTS = {"same CPU": 0, "other CPU": 1}  # the client's CPU; Redis's is 0
PRODUCERS = ("bee-queue", "app-asyncio", "app-uvloop", "sync")
T = TypeVar("T")


def client(url: str, producer: str, calls: int, rounds: int) -> None:
    """One producer's rounds, a JSON line each (run pinned by main())."""
    import leasequeue as lq

    def report(seconds: float) -> None:
        print(json.dumps({"producer": producer, "calls_per_s": calls / seconds}), flush=True)

    if producer == "sync":
        sync = lq.SyncApp(url, prefix="placement")
        for _ in range(200):
            sync.enqueue("noop")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                sync.enqueue("noop")
            report(time.perf_counter() - t0)
        sync.close()
        return

    async def rounds_of_app() -> None:
        app = lq.App(url, prefix="placement")
        app.job(lambda ctx: None, name="noop")
        for _ in range(200):
            await app.enqueue("noop")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                await app.enqueue("noop")
            report(time.perf_counter() - t0)
        await app.close()

    if producer == "app-uvloop":
        import uvloop
        uvloop.run(rounds_of_app())
    else:
        asyncio.run(rounds_of_app())


def pinned_lines(argv: list[str], cpu: int, cwd: Path | None = None) -> list[dict[str, Any]]:
    """``argv`` run on CPU ``cpu`` only (its children too): its JSON lines."""
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                         check=True, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def alternated(rep: int, items: Sequence[T]) -> Sequence[T]:
    """``items`` in order on even reps, reversed on odd ones."""
    return items if rep % 2 == 0 else items[::-1]


def producer_argv(producer: str, redis: RedisServer, calls: int, rounds: int) -> list[str]:
    if producer == "bee-queue":
        node = shutil.which("node") or "node"
        return [node, "one_call.mjs", "--port", str(redis.port), "--calls", str(calls),
                "--rounds", str(rounds)]
    return [sys.executable, str(HERE / "placement.py"), "client", "--url", redis.url,
            "--producer", producer, "--calls", str(calls), "--rounds", str(rounds)]


E2S_ARGS = ["--sections", "e2s", "--e2s-n", "200", "--e2s-budget", "2.0", "--e2s-min", "20"]


def e2s_pinned(peer: str, redis: RedisServer, cpu: int) -> dict[str, float]:
    """One bench process's e2s line (p50_ms, p99_ms), pinned with its worker."""
    if peer == "bee-queue":
        argv = [shutil.which("node") or "node", "bee.mjs", "bench", "--url", redis.url,
                *E2S_ARGS]
        cwd: Path | None = HERE / "node"
    else:
        argv = [sys.executable, str(HERE / "lq_bench.py"), "bench", "--url", redis.url,
                *E2S_ARGS]
        cwd = None
    for row in pinned_lines(argv, cpu, cwd):
        if row.get("metric") == "e2s" and "p50_ms" in row:
            return {"p50_ms": float(row["p50_ms"]), "p99_ms": float(row["p99_ms"])}
    raise RuntimeError(f"{peer}: no e2s figure (its stdout held no e2s line)")


def e2s_main(reps: int) -> None:
    redis = RedisServer()
    redis.start()
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        redis.pin({0})
        for rep in range(reps):
            for place, cpu in alternated(rep, list(PLACEMENTS.items())):
                for peer in alternated(rep, ["bee-queue", "leasequeue"]):
                    figures.setdefault((place, peer), []).append(e2s_pinned(peer, redis, cpu))
                    redis.flush()
    finally:
        redis.stop()
    print(f"# enqueue->start by placement: redis-server on CPU 0, each bench process (and the "
          f"worker it starts) on CPU 0 (same CPU) or 1 (other CPU); {reps} reps, 200 probes "
          f"each; medians of the reps' p50 and p99; {cpu_model()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| placement | bee-queue p50 / p99 (ms) | leasequeue p50 / p99 (ms) "
          "| bee-queue ÷ ours, p50 / p99 | per rep, p50 |")
    print("|---|---:|---:|---:|---|")
    for place in PLACEMENTS:
        bee, lq = figures[(place, "bee-queue")], figures[(place, "leasequeue")]
        b50, b99 = (statistics.median(f[k] for f in bee) for k in ("p50_ms", "p99_ms"))
        l50, l99 = (statistics.median(f[k] for f in lq) for k in ("p50_ms", "p99_ms"))
        per_rep = ", ".join(f"{b['p50_ms'] / m['p50_ms']:.2f}×"
                            for b, m in zip(bee, lq, strict=True))
        print(f"| {place} | {b50:.3f} / {b99:.3f} | {l50:.3f} / {l99:.3f} "
              f"| {b50 / l50:.2f}× / {b99 / l99:.2f}× | {per_rep} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", nargs="?", default="measure", choices=["measure", "client"])
    ap.add_argument("--url", default="")
    ap.add_argument("--producer", choices=PRODUCERS, default="sync")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--what", choices=["one", "e2s"], default="one",
                    help="one enqueue per call (default) or enqueue->start")
    args = ap.parse_args()
    if args.role == "client":
        client(args.url, args.producer, args.calls, args.rounds)
        return
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("placement.py needs two CPUs")
    if args.what == "e2s":
        e2s_main(args.reps)
        return
    redis = RedisServer()
    redis.start()
    try:
        redis.pin({0})
        rates: dict[tuple[str, str], list[float]] = {}
        for rep in range(args.reps):
            for place, cpu in alternated(rep, list(PLACEMENTS.items())):
                for producer in alternated(rep, PRODUCERS):
                    cwd = HERE / "node" if producer == "bee-queue" else None
                    lines = pinned_lines(
                        producer_argv(producer, redis, args.calls, args.rounds), cpu, cwd)
                    rates.setdefault((place, producer), []).extend(
                        float(line["calls_per_s"]) for line in lines)
                    redis.flush()
    finally:
        redis.stop()
    print(f"# one enqueue per call by placement: redis-server on CPU 0, the client on CPU 0 "
          f"(same CPU) or 1 (other CPU); {args.reps} reps x {args.rounds} rounds of "
          f"{args.calls} calls, medians; {cpu_model()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| placement | producer | calls/s (median) | lowest-highest | ÷ bee-queue |")
    print("|---|---|---:|---:|---:|")
    for place in PLACEMENTS:
        bee = statistics.median(rates[(place, "bee-queue")])
        for producer in PRODUCERS:
            r = rates[(place, producer)]
            med = statistics.median(r)
            print(f"| {place} | {producer} | {med:,.0f} | {min(r):,.0f}-{max(r):,.0f} "
                  f"| {med / bee:.2f}× |")


if __name__ == "__main__":
    main()

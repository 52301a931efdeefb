"""One enqueue per call at two source trees: client CPU microseconds per call
(process_time, the figure a busy machine disturbs least) and calls/s, for
SyncApp.enqueue and App.enqueue (asyncio), on one redis-server, the trees
alternating (A, B, B, A, A, B, ...) in child processes, medians of the
rounds.

Measures what scripts.OneJobCalls changed: a one-job enqueue packed onto a
head kept per (queue, job name) instead of its whole argument list packed.

  git worktree add /tmp/lq-base <commit>
  python benchmarks/one_job_calls.py --a /tmp/lq-base --b . --rounds 7
  python benchmarks/one_job_calls.py --a /tmp/lq-base --b . --callgrind

With --callgrind, the client's own instructions per call instead (valgrind's
callgrind; repeatable on a busy machine, and without the kernel's share of
the socket calls). Those children run with PYTHONHASHSEED=0 and automatic
garbage collection off: with them on, two runs of one tree differed by up
to 5% (where a collection fell, how the dicts hashed), with them off, repeated
runs of one tree by under 0.5%.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import _total
from redis_server import RedisServer

CHILD = r"""
import asyncio, gc, json, sys, time
from leasequeue import App, SyncApp
url, n = sys.argv[1], int(sys.argv[2])
layers = sys.argv[3].split(",")
if len(sys.argv) > 4 and sys.argv[4] == "nogc":
    gc.disable()
out = {}
if "SyncApp.enqueue" in layers:
    sync = SyncApp(url, prefix="onejob")
    sync.enqueue("noop", queue="default")
    c, w = time.process_time(), time.perf_counter()
    for _ in range(n):
        sync.enqueue("noop", queue="default")
    out["SyncApp.enqueue"] = ((time.process_time() - c) / n * 1e6, n / (time.perf_counter() - w))
    sync.close()

async def main():
    app = App(url, prefix="onejob")
    await app.enqueue("noop")
    c, w = time.process_time(), time.perf_counter()
    for _ in range(n):
        await app.enqueue("noop")
    out["App.enqueue"] = ((time.process_time() - c) / n * 1e6, n / (time.perf_counter() - w))
    await app.close()

if "App.enqueue" in layers:
    asyncio.run(main())
print(json.dumps(out))
"""
LAYERS = ("SyncApp.enqueue", "App.enqueue")


def run(tree: Path, url: str, n: int, layers: tuple[str, ...] = LAYERS,
        prefix: tuple[str, ...] = ()) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    counted = bool(prefix)  # under valgrind: the same run each time
    if counted:
        env["PYTHONHASHSEED"] = "0"
    # run in the tree: with -c the current directory comes first on sys.path
    done = subprocess.run([*prefix, sys.executable, "-c", CHILD, url, str(n), ",".join(layers),
                           "nogc" if counted else "gc"],
                          env=env, cwd=tree, check=True, capture_output=True, text=True,
                          timeout=1800)
    parsed: dict[str, list[float]] = json.loads(done.stdout)
    return parsed


def instructions(tree: Path, url: str, layer: str, small: int, large: int) -> float:
    """The client's instructions per call of ``layer`` (callgrind: the
    process's own, without the kernel's): two runs of the child, ``small``
    and ``large`` calls, their difference over the difference in calls."""
    totals = []
    for n in (small, large):  # (a child with its collector off: see the docstring)
        with tempfile.TemporaryDirectory(prefix="lq-onejob-") as work:
            out = Path(work) / "callgrind.out"
            run(tree, url, n, (layer,), ("valgrind", "--tool=callgrind",
                                        f"--callgrind-out-file={out}"))
            totals.append(_total(out))
    return (totals[1] - totals[0]) / (large - small)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", type=Path, required=True)
    ap.add_argument("--b", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--callgrind", action="store_true",
                    help="count the client's instructions per call instead (valgrind)")
    args = ap.parse_args()
    trees = {"A": args.a.resolve(), "B": args.b.resolve()}
    server = RedisServer()
    server.start()
    if args.callgrind:
        try:
            print("client instructions per one-job enqueue (callgrind; runs of 200 and 1,200 "
                  f"calls, the difference over 1,000), A = {trees['A']}, B = {trees['B']}")
            print(f"{'layer':18s} {'A':>9s} {'B':>9s} {'B/A':>6s}")
            for layer in LAYERS:
                a, b = (instructions(trees[t], server.url, layer, 200, 1200) for t in "AB")
                print(f"{layer:18s} {a:9,.0f} {b:9,.0f} {b / a:6.3f}")
        finally:
            server.stop()
        return
    got: dict[str, dict[str, list[tuple[float, float]]]] = {"A": {}, "B": {}}
    try:
        for round_ in range(args.rounds):
            # A, B then B, A: the tree that runs second in a round ran 5-13%
            # slower on this host whichever it was (three runs, 2026-12-03)
            order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                for layer, (cpu, rate) in run(tree, server.url, args.calls).items():
                    got[name].setdefault(layer, []).append((cpu, rate))
                server.cli("FLUSHALL")
    finally:
        server.stop()
    print(f"one enqueue per call, {args.calls} calls x {args.rounds} rounds (A B, B A, ...), "
          f"A = {trees['A']}, B = {trees['B']}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}; medians of the rounds")
    print(f"{'layer':18s} {'A CPU us':>9s} {'B CPU us':>9s} {'B/A':>6s} "
          f"{'A calls/s':>10s} {'B calls/s':>10s} {'B/A':>6s}")
    for layer in got["A"]:
        a_cpu = statistics.median(c for c, _ in got["A"][layer])
        b_cpu = statistics.median(c for c, _ in got["B"][layer])
        a_rate = statistics.median(r for _, r in got["A"][layer])
        b_rate = statistics.median(r for _, r in got["B"][layer])
        print(f"{layer:18s} {a_cpu:9.1f} {b_cpu:9.1f} {b_cpu / a_cpu:6.3f} "
              f"{a_rate:10,.0f} {b_rate:10,.0f} {b_rate / a_rate:6.3f}")


if __name__ == "__main__":
    main()

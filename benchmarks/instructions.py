"""Instructions per drained job, counted by valgrind's callgrind: a figure
that a busy machine does not move (rates and CPU times do). For each source
tree, the bench worker (benchmarks/lq_bench.py worker, concurrency 100)
drains a small and a large backlog under callgrind; the difference over the
difference in jobs is what one more job costs, start-up and shutdown cancel
out. With --redis, redis-server runs under callgrind instead (the worker
runs normally): what one job costs Redis. --concurrency sets the worker's
(100 by default; 1 is the drain_c1 figure's). With --enqueue the measured
work is the bulk enqueue instead of the drain: the client filling the queue
(lq_bench.fill: enqueue_many of 10,000 jobs per call, requests built in the
call, as the enqueue_bulk figure does), or with --redis the server under it.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/instructions.py --tree /tmp/lq-old --tree . [--redis] \
      [--concurrency 1] [--enqueue]

Needs valgrind (apt-get install valgrind). A run of one tree takes about a
minute. Under callgrind the measured process runs some 50x slower, so its
batches are as full as they get; the figure is the cost of the code at
full load, not a prediction of a rate."""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import redis as redis_sync

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from redis_server import free_port

STATS_KEY = "{bench:default}:stats"  # lq_bench's prefix and queue

FILL = """
import anyio, sys
sys.path.insert(0, {bench!r})
import lq_bench
async def main():
    app = lq_bench._app({url!r})
    await lq_bench.fill(app, {n})
    await app.close()
anyio.run(main)
"""


def wait_for_ping(client: redis_sync.Redis, timeout: float = 60.0) -> None:
    """Until the redis-server just started answers (under valgrind it takes seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.ping()
            return
        except redis_sync.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def redis_under_callgrind(*extra: str) -> Iterator[tuple[int, Callable[[], int]]]:
    """A redis-server under callgrind on a free loopback port (no persistence,
    its own data dir, ``extra`` arguments): (its port, count), where count()
    dumps the counters (callgrind_control) and returns Redis's instructions
    since the previous count(). The server is stopped and its files removed
    on exit."""
    work = tempfile.mkdtemp(prefix="lq-callgrind-redis-")
    out = f"{work}/callgrind.out"
    port = free_port()
    server = subprocess.Popen(
        [*_callgrind(Path(out)), "redis-server", "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", work, *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def count() -> int:
        # a dump writes the counts since the previous one and starts again
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        files = sorted(glob.glob(out + ".*"), key=os.path.getmtime)
        return _total(Path(files[-1]))

    try:
        probe = redis_sync.Redis(port=port)
        wait_for_ping(probe)
        probe.close()
        yield port, count
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(300)
        shutil.rmtree(work, ignore_errors=True)


def _callgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def _total(out: Path) -> int:
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def one_drain(tree: Path, n: int, on_redis: bool, concurrency: int = 100,
              enqueue: bool = False) -> int:
    """Total instructions of the worker (or Redis) draining n jobs; with
    `enqueue`, of the client (or Redis) enqueueing them."""
    work = Path(tempfile.mkdtemp(prefix="lq-instr-"))
    out = work / "callgrind.out"
    port = free_port()
    server = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--dir", str(work)]
    redis_proc = subprocess.Popen((_callgrind(out) if on_redis else []) + server,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis_sync.Redis(port=port)
    worker: subprocess.Popen[bytes] | None = None
    try:
        wait_for_ping(client)
        url = f"redis://127.0.0.1:{port}/0"
        bench = tree / "benchmarks"
        # a fixed hash seed: set and dict layouts (and so the instructions
        # spent on them) do not change from run to run
        env = {**os.environ, "PYTHONPATH": f"{bench}{os.pathsep}{tree}", "PYTHONHASHSEED": "0"}
        fill = [sys.executable, "-c", FILL.format(bench=str(bench), url=url, n=n)]
        subprocess.run((_callgrind(out) if enqueue and not on_redis else []) + fill, env=env,
                       cwd=tree, check=True,
                       stderr=subprocess.DEVNULL if enqueue and not on_redis else None)
        if not enqueue:
            argv = [sys.executable, str(bench / "lq_bench.py"), "worker", "--url", url,
                    "--concurrency", str(concurrency)]
            worker = subprocess.Popen((_callgrind(out) if not on_redis else []) + argv,
                                      env=env, cwd=tree, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            while int(client.hget(STATS_KEY, "succeeded") or 0) < n:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker of {tree} exited")
                time.sleep(0.05)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(300)
        client.close()
        redis_proc.send_signal(signal.SIGTERM)
        redis_proc.wait(300)
    total = _total(out)
    shutil.rmtree(work, ignore_errors=True)
    return total


def per_job(tree: Path, small: int, large: int, on_redis: bool, concurrency: int,
            enqueue: bool) -> float:
    def total(n: int) -> int:
        return one_drain(tree, n, on_redis, concurrency, enqueue)

    return (total(large) - total(small)) / (large - small)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--redis", action="store_true", help="count redis-server, not the worker")
    ap.add_argument("--concurrency", type=int, default=100, help="the worker's")
    ap.add_argument("--enqueue", action="store_true",
                    help="count the bulk enqueue (client, or Redis), not the drain")
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=4000)
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    side = ("redis" if args.redis else ("client" if args.enqueue else "worker")) + (
        " (bulk enqueue)" if args.enqueue else f" (drain, concurrency {args.concurrency})")
    rows = [(t, per_job(Path(t).resolve(), args.small, args.large, args.redis,
                        args.concurrency, args.enqueue))
            for t in args.tree]
    base = rows[0][1]
    print(f"| tree | {side} instructions per job | ratio to the first |")
    print("|---|---:|---:|")
    for tree, value in rows:
        print(f"| {tree} | {value:,.0f} | {value / base:.3f} |")


if __name__ == "__main__":
    main()

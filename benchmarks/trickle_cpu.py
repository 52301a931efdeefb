"""A worker's CPU per job when jobs trickle in: one worker process at a high
concurrency (100 by default) that is idle most of the time, fed one no-op job
every millisecond or so, for source trees in the same run (rounds
interleaved, one redis-server). The worker's CPU time comes from
/proc/<pid>/stat (user + system) over the trickle, after its boot; the
figure is CPU microseconds per job, which a busy machine moves less than a
latency. This is the load where the hand-off to the executors matters most:
every job arrives at a worker whose executors all wait. Beside it, over the
same trickle, Redis's CPU per job (INFO's used_cpu_sys + used_cpu_user) and
the commands Redis ran per job, scripts' own calls inside them included
(INFO commandstats): the producer's enqueues are in both, alike for every
tree.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/trickle_cpu.py --tree /tmp/lq-old --tree . [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import alternate, stop, tree_args
from redis_server import RedisServer

from leasequeue import SyncApp

PREFIX, QUEUE = "trickle", "default"
WARM_UP = 50  # jobs a worker runs before it is measured

WORKER = """
import asyncio

from leasequeue import App, Context, Worker

app = App({url!r}, prefix={prefix!r})

@app.job(retention={retention})
async def tick(ctx: Context) -> None:
    return None

asyncio.run(Worker(app, queues=[{queue!r}], concurrency={concurrency},
                   handle_signals=True).run())
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_and_calls(client: redis.Redis) -> tuple[float, int]:
    """Redis's CPU seconds so far and the commands it ran (each script's own
    calls counted too: commandstats counts them under their command)."""
    cpu = client.info("cpu")
    calls = sum(int(v["calls"]) for v in client.info("commandstats").values())
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]), calls


@dataclass(frozen=True)
class Warm:
    """A leasequeue worker up and warm (warm_worker): its pid, a client on
    its Redis, the producer that feeds it, and how many of its jobs have
    succeeded so far."""

    pid: int
    client: redis.Redis
    producer: SyncApp
    done: Callable[[], int]


def wait_for(done: Callable[[], int], count: int, what: str) -> None:
    """Until ``done()`` reaches ``count``, a minute at most."""
    deadline = time.monotonic() + 60
    while done() < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {done()} of {count} jobs done")
        time.sleep(0.01)


@contextmanager
def warm_worker(tree: Path, server: RedisServer, concurrency: int,
                retention: float) -> Iterator[Warm]:
    """A worker of ``tree`` on an emptied ``server``, booted and warmed up
    (WARM_UP jobs done: its scripts loaded), stopped gracefully after."""
    server.flush()
    code = WORKER.format(url=server.url, prefix=PREFIX, queue=QUEUE, concurrency=concurrency,
                         retention=retention)
    worker = subprocess.Popen([sys.executable, "-c", code], cwd=tree,
                              env={**os.environ, "PYTHONPATH": str(tree)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(server.url)
    producer = SyncApp(server.url, prefix=PREFIX)
    stats = f"{{{PREFIX}:{QUEUE}}}:stats"
    try:
        def done() -> int:
            return int(client.hget(stats, "succeeded") or 0)

        for _ in range(WARM_UP):
            producer.enqueue("tick", queue=QUEUE)
        wait_for(done, WARM_UP, "the warm-up")
        time.sleep(0.2)
        yield Warm(worker.pid, client, producer, done)
    finally:
        producer.close()
        client.close()
        stop(worker, 30)  # SIGTERM: the worker's graceful stop


def one_round(tree: Path, server: RedisServer, jobs: int, gap: float,
              concurrency: int, retention: float = 24 * 3600.0) -> tuple[float, float, float]:
    """Worker CPU µs, Redis CPU µs and Redis commands per job for one tree:
    boot, warm up, then the trickle."""
    with warm_worker(tree, server, concurrency, retention) as w:
        before = cpu_seconds(w.pid)
        redis_before, calls_before = redis_cpu_and_calls(w.client)
        for _ in range(jobs):
            w.producer.enqueue("tick", queue=QUEUE)
            time.sleep(gap)
        wait_for(w.done, WARM_UP + jobs, "the trickle")
        spent = cpu_seconds(w.pid) - before
        redis_after, calls_after = redis_cpu_and_calls(w.client)
        # (the two INFO calls and the polls of wait_for are in the count: a
        # few hundred commands over the trickle, the same for every tree)
        return (spent / jobs * 1e6, (redis_after - redis_before) / jobs * 1e6,
                (calls_after - calls_before) / jobs)


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap, rounds=3)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--gap-ms", type=float, default=1.0, help="pause after each enqueue")
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--retention", type=float, default=24 * 3600.0,
                    help="the job's retention in seconds (the default, a day, never runs out "
                    "in a trickle; a short one is a queue past its first retention, where "
                    "each ack also deletes the records whose retention ran out)")
    args = ap.parse_args()
    trees: list[Path] = args.tree
    with RedisServer() as server:
        rows = alternate(trees, args.rounds, lambda tree: one_round(
            tree, server, args.jobs, args.gap_ms / 1000, args.concurrency, args.retention))
    print(f"worker CPU per job, {args.jobs} jobs one every ~{args.gap_ms} ms, concurrency "
          f"{args.concurrency}, retention {args.retention:g} s, {args.rounds} rounds "
          f"interleaved; load average "
          f"{os.getloadavg()[0]:.2f}")
    print("| tree | worker CPU µs/job (median) | rounds | Redis CPU µs/job (median) | rounds "
          "| Redis commands/job (median) |")
    print("|---|---:|---|---:|---|---:|")
    for tree, values in rows.items():
        worker_us, redis_us, calls = ([v[k] for v in values] for k in range(3))
        print(f"| {tree} | {statistics.median(worker_us):.1f} | "
              f"{', '.join(f'{v:.1f}' for v in worker_us)} | "
              f"{statistics.median(redis_us):.1f} | "
              f"{', '.join(f'{v:.1f}' for v in redis_us)} | {statistics.median(calls):.2f} |")


if __name__ == "__main__":
    main()

"""What a job costs when jobs trickle in, leasequeue against bee-queue (the
fastest peer of the Node-peer runs), on one redis-server, rounds
interleaved: one worker process at concurrency 100 (bee-queue's
queue.process(100, fn), as the harness runs it), fed one no-op job and
then a pause of about a millisecond, --jobs times, by the queue's own
one-job enqueue (leasequeue's SyncApp.enqueue, bee-queue's
createJob().save() from Node). Over the trickle: Redis's CPU µs per job
(INFO's used_cpu_sys + used_cpu_user), the commands Redis ran per job
(INFO commandstats: a script's own calls counted too), and the worker
process's CPU µs per job (/proc). The producer's enqueues are in Redis's
figures for both: each queue's own. Most production queues are idle most
of the time: this is the load where a worker wakes up for every job, and
where a job costs Redis many times what it costs in a drain.

With --by-command, a second table: per command, the calls and the µs
Redis spent in it per job (commandstats; a script's time includes its own
calls, which are listed too: read the scripts' rows against the whole).

  python benchmarks/trickle_peers.py [--rounds 3] [--jobs 2000] [--gap-ms 1] [--by-command]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import stop
from redis_server import RedisServer
from trickle_cpu import (
    QUEUE,
    WARM_UP,
    cpu_seconds,
    redis_cpu_and_calls,
    wait_for,
    warm_worker,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NODE = HERE / "node"
REDIS_US = "redis_us"


def _by_command(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """commandstats: command -> (calls, µs)."""
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in client.info("commandstats").items()}


def _measure(client: redis.Redis, worker_pid: int, trickle: Callable[[], None],
             done: Callable[[], int], jobs: int) -> dict[str, Any]:
    before = cpu_seconds(worker_pid)
    redis_before, calls_before = redis_cpu_and_calls(client)
    commands_before = _by_command(client)
    started = time.monotonic()
    trickle()
    seconds = time.monotonic() - started
    wait_for(done, WARM_UP + jobs, "the trickle")
    worker_s = cpu_seconds(worker_pid) - before
    redis_after, calls_after = redis_cpu_and_calls(client)
    by_command = {name: ((calls - commands_before.get(name, (0, 0))[0]) / jobs,
                         (usec - commands_before.get(name, (0, 0))[1]) / jobs)
                  for name, (calls, usec) in _by_command(client).items()}
    return {"redis_us": (redis_after - redis_before) / jobs * 1e6,
            "commands": (calls_after - calls_before) / jobs,
            "worker_us": worker_s / jobs * 1e6, "seconds": seconds, "by_command": by_command}


def leasequeue_round(server: RedisServer, jobs: int, gap: float) -> dict[str, Any]:
    with warm_worker(ROOT, server, 100, 24 * 3600.0) as w:
        def trickle() -> None:
            for _ in range(jobs):
                w.producer.enqueue("tick", queue=QUEUE)
                time.sleep(gap)

        return _measure(w.client, w.pid, trickle, w.done, jobs)


def bee_round(server: RedisServer, jobs: int, gap: float) -> dict[str, Any]:
    server.flush()
    worker = subprocess.Popen(["node", "bee.mjs", "worker", "--url", server.url,
                               "--concurrency", "100"], cwd=NODE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(server.url)

    def producer(n: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["node", "trickle.mjs", "--url", server.url, "--n", str(n),
                                 "--gap-ms", str(gap * 1000)], cwd=NODE, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("bee-queue's producer did not start")
        return proc

    def go(proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "done":
            raise RuntimeError("bee-queue's producer did not finish")
        proc.wait(timeout=30)

    try:
        # bee-queue counts a succeeded job in the queue's succeeded set (kept)
        def done() -> int:
            return int(client.scard("bq:bench:succeeded"))

        go(producer(WARM_UP))
        wait_for(done, WARM_UP, "the warm-up")
        time.sleep(0.2)
        proc = producer(jobs)
        return _measure(client, worker.pid, lambda: go(proc), done, jobs)
    finally:
        client.close()
        stop(worker, 30)  # SIGTERM: the worker's graceful stop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--gap-ms", type=float, default=1.0, help="pause after each enqueue")
    ap.add_argument("--by-command", action="store_true", help="also the table per command")
    args = ap.parse_args()
    gap = args.gap_ms / 1000
    rows: dict[str, list[dict[str, Any]]] = {"leasequeue": [], "bee-queue": []}
    with RedisServer() as server:
        for _ in range(args.rounds):  # interleaved: a drift of the host lands on both
            rows["leasequeue"].append(leasequeue_round(server, args.jobs, gap))
            rows["bee-queue"].append(bee_round(server, args.jobs, gap))
    print(f"{args.jobs} jobs, one every ~{args.gap_ms} ms plus the enqueue, to one worker "
          f"process at concurrency 100; medians of {args.rounds} interleaved rounds; load "
          f"average {os.getloadavg()[0]:.2f}")
    print("| queue | Redis CPU µs/job | Redis commands/job | worker CPU µs/job | trickle s "
          "| Redis µs/job by round |")
    print("|---|---:|---:|---:|---:|---|")
    for name, values in rows.items():
        def med(key: str, v: list[dict[str, Any]] = values) -> float:
            return statistics.median(x[key] for x in v)

        print(f"| {name} | {med('redis_us'):.1f} | {med('commands'):.2f} | "
              f"{med('worker_us'):.1f} | {med('seconds'):.2f} | "
              f"{', '.join(f'{x[REDIS_US]:.1f}' for x in values)} |")

    if args.by_command:
        print_by_command(rows)


def print_by_command(rows: dict[str, list[dict[str, Any]]]) -> None:
    """Per queue and command: calls and µs per job, medians over the rounds
    (commands under 0.05 calls a job left out: the tool's own polls)."""
    print("\n| queue | command | calls/job | µs/job |")
    print("|---|---|---:|---:|")
    for name, values in rows.items():
        commands = {c for v in values for c in v["by_command"]}
        table = []
        for command in commands:
            calls = statistics.median(v["by_command"].get(command, (0.0, 0.0))[0] for v in values)
            usec = statistics.median(v["by_command"].get(command, (0.0, 0.0))[1] for v in values)
            if calls >= 0.05:
                table.append((usec, calls, command))
        for usec, calls, command in sorted(table, reverse=True):
            print(f"| {name} | {command} | {calls:.2f} | {usec:.1f} |")


if __name__ == "__main__":
    main()

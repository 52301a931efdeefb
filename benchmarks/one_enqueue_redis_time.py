"""Redis's own time for one enqueue per call: INFO commandstats (usec per
EVALSHA) for SyncApp.enqueue of a no-op job (enqueue_one.lua) against
bee-queue's addJob.lua called with a job like the one bee-queue's
Job.save() stores, N calls each one at a time, rounds alternating, on this
harness's own redis-server. The wall time per call is printed beside it
(SyncApp's lane for ours, redis-py's sync client for bee-queue's script:
compare the Redis column, not that one). Needs the Node peers installed
(benchmarks/node/node_modules, `python benchmarks/envs.py`).

  python benchmarks/one_enqueue_redis_time.py [N] [ROUNDS]
      > benchmarks/results/one_enqueue_redis_time.txt
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from common import cpu_model  # noqa: E402
from redis_server import RedisServer  # noqa: E402

from leasequeue import SyncApp  # noqa: E402

ADD_JOB = HERE / "node" / "node_modules" / "bee-queue" / "lib" / "lua" / "addJob.lua"
# what bee-queue's Job.save() stores for a job with no data (its toData())
BEE_JOB = b'{"data":{},"options":{"timestamp":1764900000000,"stacktraces":[]},"status":"created"}'


def evalsha_stats(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    server = RedisServer()
    server.start()
    figures: dict[str, list[tuple[float, float]]] = {"bee-queue addJob.lua": [],
                                                      "leasequeue enqueue_one.lua": []}
    try:
        client = redis.Redis.from_url(server.url)
        for _ in range(rounds):
            sha = client.script_load(ADD_JOB.read_text())
            client.config_resetstat()
            started = time.perf_counter()
            for _ in range(n):
                client.evalsha(sha, 3, "bq:b:id", "bq:b:jobs", "bq:b:waiting", "", BEE_JOB)
            wall = (time.perf_counter() - started) / n * 1e6
            calls, usec = evalsha_stats(client)
            figures["bee-queue addJob.lua"].append((usec / calls, wall))
            with SyncApp(server.url, prefix="redis-time") as sync:
                sync.enqueue("noop", queue="default")  # its queue check, untimed
                client.config_resetstat()
                started = time.perf_counter()
                for _ in range(n):
                    sync.enqueue("noop", queue="default")
                wall = (time.perf_counter() - started) / n * 1e6
                calls, usec = evalsha_stats(client)
            figures["leasequeue enqueue_one.lua"].append((usec / calls, wall))
            client.flushall()
        client.close()
    finally:
        server.stop()
    print(f"# python benchmarks/one_enqueue_redis_time.py {n} {rounds}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} cores")
    print(f"one enqueue per call, {n} calls x {rounds} rounds (alternating); each round's figure")
    print(f"{'script':28s} {'Redis usec per call':>20s} {'wall us per call':>17s}")
    for name, rows in figures.items():
        redis_us = ", ".join(f"{r:.2f}" for r, _ in rows)
        wall_us = ", ".join(f"{w:.1f}" for _, w in rows)
        print(f"{name:28s} {redis_us:>20s} {wall_us:>17s}")
        print(f"{'':28s} median {statistics.median(r for r, _ in rows):13.2f}")


if __name__ == "__main__":
    main()

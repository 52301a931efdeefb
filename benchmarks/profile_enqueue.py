"""Where one enqueue per call spends its time: cProfile of N single enqueues
against this harness's own redis-server, plus the server's own time per call
(INFO commandstats) and a bare PING for the client's floor.

Run: python benchmarks/profile_enqueue.py [N] > benchmarks/results/profile_enqueue.txt
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import anyio
import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from redis_server import RedisServer  # noqa: E402

from leasequeue import App  # noqa: E402


async def measure(url: str, n: int) -> None:
    app = App(url, prefix="profile")
    server = redis.Redis.from_url(url)
    try:
        await app.enqueue("noop", {"i": -1})
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            await app.redis.ping()
        print(f"PING: {(time.perf_counter() - t0) / n * 1e6:.1f} us wall, "
              f"{(time.process_time() - c0) / n * 1e6:.1f} us client CPU per call")
        server.config_resetstat()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            await app.enqueue("noop", {"i": i})
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = server.info("commandstats")["cmdstat_evalsha"]
        print(f"enqueue: {n / wall:.0f} jobs/s; {wall / n * 1e6:.1f} us wall, "
              f"{cpu / n * 1e6:.1f} us client CPU, {stats['usec_per_call']:.1f} us in Redis "
              "per call")
        profile = cProfile.Profile()
        profile.enable()
        for i in range(n):
            await app.enqueue("noop", {"i": i})
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())
    finally:
        server.close()
        await app.close()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    with RedisServer() as srv:
        anyio.run(measure, srv.url, n)


if __name__ == "__main__":
    main()

"""What a read timer armed and cancelled per call costs a round trip on this
machine: PING on one asyncio stream, N per figure, three ways, interleaved
(repetitions alternate), medians of R:

- no timer: nothing pending in the loop while the reply is awaited;
- a timer per call: loop.call_at(now + 5 s) before the write, cancelled
  after the reply (what store/direct.py's _read did before direct._Watch);
- one far timer pending: a single timer armed once, as direct._Watch keeps
  a busy connection's.

Wall and client CPU (process_time) per call. Run:
  python benchmarks/read_timer.py [N] [R] > benchmarks/results/read_timer.txt
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import hiredis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from redis_server import RedisServer  # noqa: E402

PING = hiredis.pack_command(("PING",))


async def measure(port: int, n: int, reps: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    parser = hiredis.Reader()
    loop = asyncio.get_running_loop()

    async def ping() -> None:
        writer.write(PING)
        while True:
            parser.feed(await reader.read(65536))
            if parser.gets() is not False:
                return

    async def ping_timer_per_call() -> None:
        handle = loop.call_at(loop.time() + 5.0, lambda: None)
        await ping()
        handle.cancel()

    ways: list[tuple[str, Callable[[], Awaitable[None]], bool]] = [
        ("no timer", ping, False),
        ("a timer per call", ping_timer_per_call, False),
        ("one far timer pending", ping, True),
    ]
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in ways}
    for _ in range(reps):
        for name, call, far in ways:
            pending = loop.call_later(3600, lambda: None) if far else None
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(n):
                await call()
            figures[name].append(((time.perf_counter() - t0) / n * 1e6,
                                  (time.process_time() - c0) / n * 1e6))
            if pending is not None:
                pending.cancel()
    writer.close()
    base_cpu = statistics.median(c for _, c in figures["no timer"])
    print(f"PING round trips on one asyncio stream, {n} per figure, medians of {reps} "
          f"interleaved repetitions; load average {os.getloadavg()[0]:.2f}")
    for name, values in figures.items():
        wall = statistics.median(w for w, _ in values)
        cpu = statistics.median(c for _, c in values)
        print(f"  {name:22s} {wall:6.1f} us wall  {cpu:6.1f} us client CPU "
              f"({cpu - base_cpu:+.1f} over no timer)")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with RedisServer() as server:
        asyncio.run(measure(server.port, n, reps))


if __name__ == "__main__":
    main()

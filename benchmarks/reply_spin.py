"""One enqueue per call with the reply read off the socket (store/spin.py)
and without it (StoreSettings.reply_spin_us=0), on this harness's own
redis-server, in alternating rounds: calls/s and client CPU per call for
App (asyncio's loop, or uvloop's with --loop uvloop) and SyncApp; then how
long after the write the spin's reads found the reply (the spin's own
clock, a budget of 1 ms so none runs out), percentiles over the calls.

Run: python benchmarks/reply_spin.py [--calls 5000] [--rounds 5] [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import cpu_model
from redis_server import RedisServer

import leasequeue as lq
from leasequeue.store import spin

BUDGETS = {"spin 50 us": 50, "no spin": 0}


def _app(url: str, budget: int) -> lq.App:
    app = lq.App(url, prefix=f"rs{budget}", settings=lq.StoreSettings(reply_spin_us=budget))
    app.job(lambda ctx: None, name="noop")
    return app


def _timed(n: int, call: Callable[[], Any]) -> tuple[float, float]:
    """(calls/s, client CPU us a call) of n calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        call()
    return n / (time.perf_counter() - wall), (time.process_time() - cpu) / n * 1e6


async def _async_round(app: lq.App, n: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await app.enqueue("noop")
    return n / (time.perf_counter() - wall), (time.process_time() - cpu) / n * 1e6


def rates(url: str, calls: int, rounds: int, loop: str) -> dict[str, list[tuple[float, float]]]:
    """(calls/s, client CPU us a call) per round: App's rows on ``loop``, then SyncApp's."""
    return {**app_rates(url, calls, rounds, loop), **sync_rates(url, calls, rounds)}


def app_rates(url: str, calls: int, rounds: int,
              loop: str) -> dict[str, list[tuple[float, float]]]:
    """App's one enqueue per call on ``loop``, with the spin and without it,
    alternating: (calls/s, client CPU us a call) per round, by "App, <mode>"."""
    figures: dict[str, list[tuple[float, float]]] = {}
    runner = asyncio.run
    if loop == "uvloop":
        import uvloop
        runner = uvloop.run

    async def async_rounds() -> None:
        apps = {name: _app(url, budget) for name, budget in BUDGETS.items()}
        for app in apps.values():
            for _ in range(200):  # warm: scripts loaded, lanes connected
                await app.enqueue("noop")
        for k in range(rounds):
            for name in (list(apps) if k % 2 == 0 else list(apps)[::-1]):
                figures.setdefault(f"App, {name}", []).append(
                    await _async_round(apps[name], calls))
        for app in apps.values():
            await app.close()

    runner(async_rounds())
    return figures


def sync_rates(url: str, calls: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """SyncApp's, as app_rates (by "SyncApp, <mode>")."""
    figures: dict[str, list[tuple[float, float]]] = {}
    syncs = {name: lq.SyncApp(url, prefix=f"rs{budget}",
                              settings=lq.StoreSettings(reply_spin_us=budget))
             for name, budget in BUDGETS.items()}
    for sync in syncs.values():
        for _ in range(200):
            sync.enqueue("noop")
    for k in range(rounds):
        for name in (list(syncs) if k % 2 == 0 else list(syncs)[::-1]):
            sync = syncs[name]
            figures.setdefault(f"SyncApp, {name}", []).append(
                _timed(calls, lambda s=sync: s.enqueue("noop")))
    for sync in syncs.values():
        sync.close()
    return figures


def arrivals(url: str, calls: int) -> dict[str, list[float]]:
    """Microseconds from the spin's start to the reply, per call."""
    got: dict[str, list[float]] = {"App": [], "SyncApp": []}
    read = spin.ReplySpin.read
    into: list[float] = []

    def timed_read(self: spin.ReplySpin, read_now: Any, reader: Any) -> Any:
        started = time.perf_counter_ns()
        reply = read(self, read_now, reader)
        into.append((time.perf_counter_ns() - started) / 1000)
        return reply

    spin.ReplySpin.read = timed_read  # type: ignore[method-assign]
    try:
        async def one_app() -> None:
            app = _app(url, 1000)
            for _ in range(200):
                await app.enqueue("noop")
            into.clear()
            for _ in range(calls):
                await app.enqueue("noop")
            got["App"] = list(into)
            await app.close()

        asyncio.run(one_app())
        with lq.SyncApp(url, prefix="rs-a", settings=lq.StoreSettings(reply_spin_us=1000)) as s:
            for _ in range(200):
                s.enqueue("noop")
            into.clear()
            for _ in range(calls):
                s.enqueue("noop")
            got["SyncApp"] = list(into)
    finally:
        spin.ReplySpin.read = read  # type: ignore[method-assign]
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = ap.parse_args()
    with RedisServer() as server:
        figures = rates(server.url, args.calls, args.rounds, args.loop)
        times = arrivals(server.url, 4 * args.calls)
    print(f"# python benchmarks/reply_spin.py --calls {args.calls} --rounds {args.rounds} "
          f"--loop {args.loop}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{cpu_model()}, {os.cpu_count()} cores")
    print(f"one enqueue per call, App on {args.loop}'s loop and SyncApp, the reply read off "
          f"the socket (budget 50 us) or not; {args.calls} calls x {args.rounds} alternating "
          "rounds, medians of the rounds")
    print(f"{'':28s} {'calls/s':>10s} {'client CPU us/call':>20s}")
    for name, rows in figures.items():
        rate = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"{name:28s} {rate:>10,.0f} {cpu:>20.1f}")
    print("the spin's start to the reply (us), budget 1 ms, "
          f"{4 * args.calls} calls each: p10 / p50 / p90 / p99 / p99.9")
    for name, values in times.items():
        values.sort()
        n = len(values)
        cuts = " / ".join(f"{values[min(n - 1, int(n * q))]:.1f}"
                          for q in (0.1, 0.5, 0.9, 0.99, 0.999))
        print(f"{name:28s} {cuts}")


if __name__ == "__main__":
    main()

"""One enqueue per call on a quiet host and on a busy one, with the reply
spin (the default: the reply read off the socket for up to 50 us,
store/spin.py) and without it (StoreSettings(reply_spin_us=0)), for App
on asyncio's loop and on uvloop's and for SyncApp, on this harness's own
redis-server, beside a background load of processes each busy ``duty`` of
the time (duty_load.py). The two alternate within each round; medians of
the rounds.

  python benchmarks/busy_host.py [--duties 0,0.25,0.5,0.9] [--procs 1] [--rounds 5]
                                 [--calls 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duty_load
from common import cpu_model
from redis_server import RedisServer

import leasequeue as lq

MODES = ("spin", "no spin")
BUDGET_US = lq.StoreSettings().reply_spin_us  # the default


def _settings(mode: str) -> lq.StoreSettings:
    return lq.StoreSettings(reply_spin_us=0 if mode == "no spin" else BUDGET_US)


async def _app_calls(url: str, mode: str, calls: int) -> float:
    app = lq.App(url, prefix=f"busy-{mode[0]}", settings=_settings(mode))
    try:
        await app.enqueue("noop")  # the scripts loaded, the queue checked
        started = time.perf_counter()
        for _ in range(calls):
            await app.enqueue("noop")
        return calls / (time.perf_counter() - started)
    finally:
        await app.close()


def _sync_calls(url: str, mode: str, calls: int) -> float:
    with lq.SyncApp(url, prefix=f"busy-s{mode[0]}", settings=_settings(mode)) as sync:
        sync.enqueue("noop")
        started = time.perf_counter()
        for _ in range(calls):
            sync.enqueue("noop")
        return calls / (time.perf_counter() - started)


def _on(loop: str, main: Callable[[], Coroutine[Any, Any, float]]) -> float:
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


PRODUCERS: dict[str, Callable[[str, str, int], float]] = {
    "App, asyncio": lambda url, mode, n: _on("asyncio", lambda: _app_calls(url, mode, n)),
    "App, uvloop": lambda url, mode, n: _on("uvloop", lambda: _app_calls(url, mode, n)),
    "SyncApp": _sync_calls,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duties", default="0,0.25,0.5,0.9")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5000)
    args = ap.parse_args()
    duties = [float(d) for d in args.duties.split(",")]
    server = RedisServer()
    server.start()
    print(f"# python benchmarks/busy_host.py --duties {args.duties} --procs {args.procs} "
          f"--rounds {args.rounds} --calls {args.calls}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} cores")
    print(f"one enqueue per call, calls/s (medians of the rounds), with the spin "
          f"({BUDGET_US} us) and without it; the last column: spin over no spin")
    try:
        for duty in duties:
            loads = duty_load.start(duty, args.procs)
            try:
                rates: dict[tuple[str, str], list[float]] = {}
                for _ in range(args.rounds):
                    for producer, run in PRODUCERS.items():
                        for mode in MODES:
                            rates.setdefault((producer, mode), []).append(
                                run(server.url, mode, args.calls))
                    server.cli("FLUSHALL")
            finally:
                duty_load.stop(loads)
            print(f"\nbeside {args.procs} process(es) busy {duty:.0%} of the time")
            print(f"{'producer':14s} " + " ".join(f"{m:>10s}" for m in MODES) + "   ratio")
            for producer in PRODUCERS:
                med = {m: statistics.median(rates[(producer, m)]) for m in MODES}
                print(f"{producer:14s} " + " ".join(f"{med[m]:10,.0f}" for m in MODES)
                      + f"   {med['spin'] / med['no spin']:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

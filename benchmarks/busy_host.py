"""One enqueue per call on a quiet host and on a busy one, with the reply
spin (the default: the reply read off the socket for up to 50 us,
store/spin.py) and without it (StoreSettings(reply_spin_us=0)), for App
on asyncio's loop and on uvloop's and for SyncApp, on this harness's own
redis-server, beside a background load of processes each busy ``duty`` of
the time (duty_load.py): reply_spin.py's rounds (the two alternating, the
producers warmed by 200 calls), medians of the rounds.

  python benchmarks/busy_host.py [--duties 0,0.25,0.5,0.9] [--procs 1] [--rounds 5]
                                 [--calls 5000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duty_load
import reply_spin
from common import cpu_model
from redis_server import RedisServer

LOOPS = ("asyncio", "uvloop")


def measure(url: str, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median calls/s by producer, then mode ("spin 50 us", "no spin"):
    reply_spin.py's alternating rounds, App on each loop, then SyncApp."""
    figures: dict[str, dict[str, float]] = {}
    for loop in LOOPS:
        for name, rows in reply_spin.app_rates(url, calls, rounds, loop).items():
            figures.setdefault(f"App, {loop}", {})[name.removeprefix("App, ")] = \
                statistics.median(r[0] for r in rows)
    for name, rows in reply_spin.sync_rates(url, calls, rounds).items():
        figures.setdefault("SyncApp", {})[name.removeprefix("SyncApp, ")] = \
            statistics.median(r[0] for r in rows)
    return figures


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
    print("one enqueue per call, calls/s (medians of the rounds), with the spin and "
          "without it; the last column: spin over no spin")
    try:
        for duty in duties:
            loads = duty_load.start(duty, args.procs)
            try:
                figures = measure(server.url, args.calls, args.rounds)
            finally:
                duty_load.stop(loads)
            modes = list(reply_spin.BUDGETS)
            print(f"\nbeside {args.procs} process(es) busy {duty:.0%} of the time")
            print(f"{'producer':14s} " + " ".join(f"{m:>11s}" for m in modes) + "   ratio")
            for producer, med in figures.items():
                print(f"{producer:14s} " + " ".join(f"{med[m]:11,.0f}" for m in modes)
                      + f"   {med[modes[0]] / med[modes[1]]:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

"""How far one host moves the client's own speed from one process to the
next: App.enqueue from 100 tasks with the script call stubbed (no Redis,
no I/O, no arguments formatted: common.stubbed_app, the call
concurrent_instructions.py counts), three reps in each of
``--processes`` fresh processes started one after the other, each with
the same hash seed; optionally with address-space randomisation off
(``setarch -R``) or pinned to one CPU (``taskset``), alternating CPUs 0
and 1. Same code, same minute: what is left between processes is the
host's, not the code's (what in the host sets it, this does not say).

  python benchmarks/process_spread.py [--processes 8] [--n 100000] [--no-aslr] [--pin]

Prints each process's three rates and the spread of the processes'
medians."""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLIENT = """
import asyncio, sys
sys.path.insert(0, sys.argv[2])
import common

async def main(n):
    app = common.stubbed_app("spread")  # no Redis: the script call answers a turn later
    rates = []
    for _ in range(3):
        result = await common.concurrent_enqueue(lambda: app.enqueue("noop"), n, budget=60.0)
        rates.append(float(result["value"]))
    print(" ".join(f"{r:.0f}" for r in rates))

asyncio.run(main(int(sys.argv[1])))
"""


def one(n: int, no_aslr: bool, cpu: int | None) -> list[float]:
    cmd = [sys.executable, "-c", CLIENT, str(n), os.path.join(ROOT, "benchmarks")]
    if no_aslr:
        cmd = ["setarch", "-R", *cmd]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": ROOT}
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--no-aslr", action="store_true", help="setarch -R")
    ap.add_argument("--pin", action="store_true", help="taskset: CPU 0, then 1, alternating")
    args = ap.parse_args()
    for tool, wanted in (("setarch", args.no_aslr), ("taskset", args.pin)):
        if wanted and shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {common.cpu_model()}; "
          f"PYTHONHASHSEED=0{', setarch -R' if args.no_aslr else ''}"
          f"{', pinned' if args.pin else ''}; {args.n:,} calls a rep, 3 reps a process")
    print("| process | CPU | jobs/s, each rep | median |")
    print("|---:|---|---|---:|")
    medians = []
    for i in range(args.processes):
        cpu = i % 2 if args.pin else None
        rates = one(args.n, args.no_aslr, cpu)
        medians.append(statistics.median(rates))
        print(f"| {i + 1} | {'any' if cpu is None else cpu} | "
              f"{', '.join(f'{r:,.0f}' for r in rates)} | {medians[-1]:,.0f} |", flush=True)
    print(f"\nthe processes' medians: {min(medians):,.0f}-{max(medians):,.0f} jobs/s "
          f"(highest ÷ lowest {max(medians) / min(medians):.2f})")


if __name__ == "__main__":
    main()

"""A background load: processes that each keep a CPU busy ``duty`` of the
time (busy, then asleep, in periods of 2 ms), as the other work of a host
does. A host's idle CPUs are what make a sleep's wake-up dear: a process
woken on a CPU that was idle waits for that CPU to come back from its idle
state (on a VM, for the hypervisor to run it again), where on a busy CPU it
only takes a turn. benchmarks/busy_host.py runs its rounds beside it; to
run the harness beside it:

  python benchmarks/duty_load.py --duty 0.5 --procs 1 &
  python benchmarks/run.py --peers bullmq-node,bee-queue-node --out benchmarks/results/NAME
  kill %1    # (TERM: its burners stop with it)
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from types import FrameType

PERIOD = 0.002  # seconds: one busy stretch and one sleep


def burn(duty: float) -> None:
    """Busy ``duty`` of each period, asleep for the rest, until killed."""
    busy, idle = PERIOD * duty, PERIOD * (1 - duty)
    while True:
        started = time.perf_counter()
        while time.perf_counter() - started < busy:
            pass
        if idle > 0:
            time.sleep(idle)


def start(duty: float, procs: int) -> list[subprocess.Popen[bytes]]:
    """``procs`` processes burning ``duty`` of a CPU each (none for a duty of 0)."""
    if duty <= 0:
        return []
    return [subprocess.Popen([sys.executable, __file__, "--duty", str(duty), "--procs", "0"])
            for _ in range(procs)]


def stop(loads: list[subprocess.Popen[bytes]]) -> None:
    for p in loads:
        p.kill()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duty", type=float, default=0.5, help="share of each period busy (0-1)")
    ap.add_argument("--procs", type=int, default=1, help="processes (0: burn in this one)")
    args = ap.parse_args()
    if not 0 <= args.duty <= 1:
        raise SystemExit("--duty is a share of the time: 0 to 1")
    if args.procs == 0:
        burn(args.duty)
        return
    signal.signal(signal.SIGTERM, _exit)  # `kill`: the burners go too
    loads = start(args.duty, args.procs)
    try:
        for p in loads:
            p.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop(loads)


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    main()

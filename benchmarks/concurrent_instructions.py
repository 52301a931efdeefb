"""The client's instructions per App.enqueue call from 100 tasks with the
script call stubbed (client_ceiling.py's "App.enqueue, Redis stubbed" row),
counted by valgrind's callgrind: a figure a busy host does not move, where
the rates and CPU times of the same code moved by 20% from one minute to the
next on the AMD EPYC host (2026-12-07). For each source tree and loop, one
process makes ``--small`` calls and one ``--large`` calls, each under
callgrind; the difference over the difference in calls is what one more call
costs (start-up, imports and shutdown cancel out). No Redis: the App's queue
is taken as checked and its coalescer's script call answers every job
"queued" after one turn of the loop, so the figure is the client's own work:
the call, the job, the coalescer's batch, ids and answers, parking and
waking the caller.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/concurrent_instructions.py --tree /tmp/lq-old --tree . \
      [--small 10000] [--large 100000] [--loop asyncio --loop uvloop]

Needs valgrind (apt-get install valgrind). Under callgrind a call runs some
50x slower: a tree and loop at the defaults take about a minute and a half."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import _callgrind, _total

CLIENT = """
import asyncio, sys
sys.path.insert(0, sys.argv[3])  # this benchmarks/ (the tree's leasequeue is on PYTHONPATH)
import common

async def main(n):
    app = common.stubbed_app("ci")  # no Redis: the script call answers a turn later
    done = 0
    async def loop():  # common.concurrent_enqueue's loop
        nonlocal done
        while done < n:
            done += 1
            await app.enqueue("noop")
    await asyncio.gather(*(loop() for _ in range(100)))

n, kind = int(sys.argv[1]), sys.argv[2]
if kind == "uvloop":
    import uvloop
    uvloop.run(main(n))
else:
    asyncio.run(main(n))
"""


def total(tree: Path, n: int, loop: str) -> int:
    """Instructions of one process making ``n`` stubbed calls from 100 tasks
    on ``loop``, importing the leasequeue of ``tree``."""
    work = tempfile.mkdtemp(prefix="lq-callgrind-client-")
    try:
        out = Path(work) / "callgrind.out"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([*_callgrind(out), sys.executable, "-c", CLIENT, str(n), loop,
                        os.path.dirname(os.path.abspath(__file__))],
                       env=env, cwd=tree, check=True, capture_output=True)
        return _total(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path, required=True)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--large", type=int, default=100_000)
    ap.add_argument("--loop", action="append", choices=("asyncio", "uvloop"))
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    loops = args.loop or ["asyncio", "uvloop"]
    print(f"client instructions per App.enqueue call from 100 tasks, script call stubbed "
          f"(callgrind; runs of {args.small:,} and {args.large:,} calls)")
    print("| loop | tree | instructions per call | ratio to the first |")
    print("|---|---|---:|---:|")
    for loop in loops:
        first = None
        for tree in args.tree:
            per_call = ((total(tree, args.large, loop) - total(tree, args.small, loop))
                        / (args.large - args.small))
            first = first or per_call
            print(f"| {loop} | {tree} | {per_call:,.0f} | {per_call / first:.3f} |", flush=True)


if __name__ == "__main__":
    main()

"""The client's system calls per App.enqueue from 100 tasks, for source
trees: ``strace -c -f`` of one process per tree making 50,000 calls (500 per
task) against a redis-server of its own, and the count of each system call
the enqueue path makes, per job. Callgrind (concurrent_instructions.py)
counts only user-space instructions, so a system call on the hot path
(a getpid() a job from asyncio.get_running_loop() on Python 3.11, until
2026-12-07) shows here and not there.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/syscalls.py --tree /tmp/lq-old --tree .
  python benchmarks/syscalls.py --tree /tmp/lq-old --tree . --tasks 1 --each 5000

``--tasks 1``: one enqueue at a time, each a lone call (the one-per-call
column's path: the reply spun for, the job's id drawn per call).

Needs strace. The counts hold start-up and imports (the file system calls);
the rows below are the per-job ones."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import tree_args
from redis_server import RedisServer

TASKS, EACH = 100, 500  # the defaults of --tasks and --each
SHOWN = ("getpid", "sendto", "recvfrom", "read", "epoll_wait", "getrandom", "futex")

CLIENT = """
import asyncio
from leasequeue import App, JobRequest

async def main():
    app = App({url!r}, prefix="sc")
    await app.enqueue_many([JobRequest("noop") for _ in range(1000)])  # scripts loaded

    async def loop():
        for _ in range({each}):
            await app.enqueue("noop")

    await asyncio.gather(*(loop() for _ in range({tasks})))
    await app.close()

asyncio.run(main())
"""


def counts(tree: Path, url: str, tasks: int, each: int) -> dict[str, int]:
    """Calls per system call of one client process of ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "strace.txt"
        subprocess.run(["strace", "-c", "-f", "-o", str(out), sys.executable, "-c",
                        CLIENT.format(url=url, each=each, tasks=tasks)],
                       env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, check=True,
                       capture_output=True)
        found: dict[str, int] = {}
        for line in out.read_text().splitlines():
            cols = line.split()
            if len(cols) >= 5 and cols[3].isdigit():  # % seconds usecs/call calls [errors] name
                found[cols[-1]] = int(cols[3])
        return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    tree_args(ap)
    ap.add_argument("--tasks", type=int, default=TASKS, help="concurrent tasks")
    ap.add_argument("--each", type=int, default=EACH, help="calls per task")
    args = ap.parse_args()
    with RedisServer() as server:
        rows = {tree: counts(tree, server.url, args.tasks, args.each) for tree in args.tree}
    jobs = args.tasks * args.each
    print(f"system calls of {jobs:,} App.enqueue calls from {args.tasks} task(s) "
          "(strace -c -f)")
    print("| tree | " + " | ".join(SHOWN) + " | per job, all shown |")
    print("|---|" + "---:|" * (len(SHOWN) + 1))
    for tree, found in rows.items():
        cells = " | ".join(f"{found.get(name, 0):,}" for name in SHOWN)
        per_job = sum(found.get(name, 0) for name in SHOWN) / jobs
        print(f"| {tree} | {cells} | {per_job:.2f} |")


if __name__ == "__main__":
    main()

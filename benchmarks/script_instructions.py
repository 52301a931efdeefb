"""Redis instructions per job of each hot script on its own, counted by
valgrind's callgrind: redis-server runs under callgrind, one client (this
tree's package, or another tree's) enqueues N jobs in one enqueue_many
(500 per script call), then claims them one per call, then acks them one
per call; the counters are dumped (callgrind_control) between the phases,
so each figure is one phase's Redis instructions divided by N. No worker
runtime: what claim.lua and ack.lua cost per job at concurrency 1, and
enqueue.lua per job in bulk. The counts include what Redis does on its own
meanwhile (serverCron), a little.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/script_instructions.py --tree /tmp/lq-old --tree . [--n 1000] [--fresh]

--fresh sends the batch into a queue whose jobs hash is still small and a
listpack (its 10 warm-up jobs queued, not acked: a finished record is longer
than hash-max-listpack-value and turns the hash into a hashtable), as a
new queue's first batch finds it.

Needs valgrind (apt-get install valgrind)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from instructions import redis_under_callgrind

PHASES = ("enqueue", "claim", "ack")

CLIENT = """
import inspect, sys
import anyio, lq_bench
from leasequeue import JobRequest

async def main():
    app = lq_bench._app({url!r})
    qk = app.keys(lq_bench.QUEUE)
    # a tree before idempotent claims takes no start_now and claim_id
    new = "claim_id" in inspect.signature(app.scripts.claim).parameters

    async def claim(i):
        extra = (1, f"c{{i}}") if new else ()
        return await app.scripts.claim(qk, 1, lq_bench.LEASE_MS, "w", *extra)

    await app.enqueue_many([JobRequest("noop") for _ in range(10)])  # scripts loaded
    for i in range(0 if {fresh} else 10):
        await lq_bench.ack_all(app, qk, (await claim(-1 - i)).jobs, 86_400_000)
    print("ready", flush=True); sys.stdin.readline()
    await app.enqueue_many([JobRequest("noop") for _ in range({n})])
    print("enqueue", flush=True); sys.stdin.readline()
    held = []
    for i in range({n}):
        held += (await claim(i)).jobs
    print("claim", flush=True); sys.stdin.readline()
    for job in held:
        await lq_bench.ack_all(app, qk, [job], 86_400_000)
    print("ack", flush=True); sys.stdin.readline()
    await app.close()

anyio.run(main)
"""


def per_phase(tree: Path, n: int, fresh: bool = False) -> dict[str, float]:
    with redis_under_callgrind() as (port, count):
        code = CLIENT.format(url=f"redis://127.0.0.1:{port}/0", n=n, fresh=fresh)
        return run_phases(code, tree, count, n)


def run_phases(code: str, tree: Path, count: Callable[[], int], n: int) -> dict[str, float]:
    """Run the client ``code`` with ``tree``'s package: it prints "ready",
    then the name of each of PHASES as it finishes it, and waits for a line
    before going on; Redis's instructions of each phase (``count``: since
    the last count) divided by ``n``."""
    env = {**os.environ, "PYTHONPATH": f"{tree / 'benchmarks'}{os.pathsep}{tree}",
           "PYTHONHASHSEED": "0"}
    client = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tree, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    result: dict[str, float] = {}
    try:
        assert client.stdin is not None and client.stdout is not None
        for phase in ("ready", *PHASES):
            line = client.stdout.readline().strip()
            if line != phase:
                raise RuntimeError(f"the client of {tree} said {line!r}, not {phase!r}")
            instructions = count()
            if phase != "ready":
                result[phase] = instructions / n
            client.stdin.write("\n")
            client.stdin.flush()
        client.wait(60)
    finally:
        if client.poll() is None:
            client.kill()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", required=True, help="a source tree (repeat)")
    ap.add_argument("--n", type=int, default=1000, help="jobs per phase")
    ap.add_argument("--fresh", action="store_true",
                    help="the queue holds only its 10 warm-up jobs, queued, when the batch "
                         "comes (a small jobs hash, a listpack); by default they are acked "
                         "first, and a finished record makes the hash a hashtable")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    rows = [(t, per_phase(Path(t).resolve(), args.n, args.fresh)) for t in args.tree]
    base = rows[0][1]
    print("| tree | " + " | ".join(f"{p} (Redis instructions per job)" for p in PHASES) + " |")
    print("|---|" + "---:|" * len(PHASES))
    for tree, figures in rows:
        cells = [f"{figures[p]:,.0f} ({figures[p] / base[p]:.3f})" for p in PHASES]
        print(f"| {tree} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

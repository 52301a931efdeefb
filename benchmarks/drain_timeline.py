"""Where a drain at concurrency 100 spends its time: the worker's claims and
acks on a timeline, per source tree (issue 11).

One worker process (concurrency 100, as the drain column's) drains --n
no-op jobs from its own redis-server. The worker is a real Worker whose
Scripts.claim and Scripts.ack are wrapped to take the time of each call's
send and reply, whose claimer records the jobs it held (in_use) as it sent
each claim, and whose hand-over queue to the executors records when it
ran empty: the time between the last job taken from it and the next claim's
jobs put in it, when every executor has run out of work (a no-op job
ends as it is taken). Python's garbage collector is timed through
gc.callbacks. The middle half of the drain is read (no
ramp-up, no tail):

- jobs/s, and the worker's and Redis's CPU (% of a core) over the drain;
- per claim: the jobs it asked for and got, and how many the worker held
  when it sent it (0: the claim went out only once the worker had nothing
  left to run, so the worker and Redis took turns);
- the share of the time the hand-over queue was empty (the executors
  idle, waiting for the next claim's jobs);
- the collector's passes and time per 1,000 jobs.

  python benchmarks/drain_timeline.py [--n 100000] [--tree PATH ...] [--rounds 3]

With several --tree, the trees are run in turn, --rounds times (A, B, A,
B ...), each worker importing the leasequeue of its tree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
import lq_bench
from redis_server import RedisServer

# runs in the worker process: wraps what it times, then runs lq_bench's worker
WORKER = r"""
import atexit, gc, json, sys, time
sys.path.insert(0, BENCH)
from leasequeue.store import scripts as _s
from leasequeue.runtime import claimer as _c, dispatch as _d
clock = time.perf_counter
events = []

def timed(name):
    original = getattr(_s.Scripts, name)
    async def call(self, *args, **kwargs):
        sent = clock()
        reply = await original(self, *args, **kwargs)
        got = len(reply.jobs) if name == "claim" else len(reply)
        events.append((name, sent, clock(), got))
        return reply
    setattr(_s.Scripts, name, call)

timed("claim")
timed("ack")
claim = _c.Claimer._claim
async def claim_noting_what_is_held(self, queue, count, dispatch):
    events.append(("held", clock(), self._slots.in_use, count))
    return await claim(self, queue, count, dispatch)
_c.Claimer._claim = claim_noting_what_is_held
get, put_many = _d.Dispatch.get, _d.Dispatch.put_many
async def get_noting_empty(self):
    run = await get(self)
    if not self._jobs:
        events.append(("empty", clock(), 0, 0))
    return run
def put_many_noting(self, jobs):
    events.append(("fill", clock(), 0, len(jobs)))
    put_many(self, jobs)
_d.Dispatch.get, _d.Dispatch.put_many = get_noting_empty, put_many_noting
began = {}
def collected(phase, info):
    if phase == "start":
        began["t"] = clock()
    else:
        events.append(("gc", began["t"], clock(), info["generation"]))
gc.callbacks.append(collected)
atexit.register(lambda: open(OUT, "w").write(json.dumps(events)))
import lq_bench
lq_bench.main(["worker", "--url", URL, "--concurrency", "100"])
"""


def one_drain(tree: Path, n: int) -> dict[str, Any]:
    server = RedisServer()
    server.start()
    out = Path(tempfile.mkstemp(prefix="lq-timeline-", suffix=".json")[1])
    try:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        bench = os.path.dirname(os.path.abspath(__file__))
        fill = (f"import sys, anyio; sys.path.insert(0, {bench!r}); import lq_bench\n"
                f"async def main():\n    app = lq_bench._app({server.url!r})\n"
                f"    await lq_bench.fill(app, {n})\n    await app.close()\n"
                "anyio.run(main)\n")
        common.run_in_tree(tree, fill)
        code = (f"BENCH, URL, OUT = {bench!r}, {server.url!r}, {str(out)!r}\n" + WORKER)
        worker = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tree)
        client, left = lq_bench.left_counter(server.url)
        sample = common.cpu_sampler(server.url, lambda: [worker.pid])
        result = common.measure_drain(left, n, 120.0, alive=lambda: worker.poll() is None,
                                      sample=sample)
        common.stop(worker)
        client.close()
        events = json.loads(out.read_text())
    finally:
        server.stop()
        out.unlink(missing_ok=True)
    return {**result, **read_timeline(events)}


def read_timeline(events: list[list[Any]]) -> dict[str, Any]:
    """The middle half of the drain, by the claims' send times."""
    claims = sorted((e for e in events if e[0] == "claim"), key=lambda e: e[1])
    if len(claims) < 8:
        return {"error": "too few claims to read"}
    lo, hi = claims[len(claims) // 4][1], claims[3 * len(claims) // 4][1]
    span = hi - lo

    def within(kind: str) -> list[list[Any]]:
        return [e for e in events if e[0] == kind and lo <= e[1] < hi]

    middle = within("claim")
    jobs = sum(e[3] for e in middle)
    helds, acks = within("held"), within("ack")
    held = [e[2] for e in helds]
    asked = [e[3] for e in helds]
    marks = sorted((e[1], e[0]) for e in events if e[0] in ("empty", "fill") and lo <= e[1] < hi)
    empty, since = 0.0, None
    for t, kind in marks:
        if kind == "empty" and since is None:
            since = t
        elif kind == "fill" and since is not None:
            empty, since = empty + t - since, None
    gcs = within("gc")
    return {
        "claims": len(middle),
        "jobs_per_claim": round(jobs / len(middle), 1),
        "asked_per_claim": round(statistics.fmean(asked), 1) if asked else None,
        "held_at_claim_p50": statistics.median(held) if held else None,
        "claim_round_trip_ms_p50": round(1e3 * statistics.median(e[2] - e[1] for e in middle), 3),
        "ack_round_trip_ms_p50": round(1e3 * statistics.median(
            e[2] - e[1] for e in acks), 3) if acks else None,
        "handover_empty_pct": round(100 * empty / span, 1),
        "gc_passes_per_1k_jobs": round(1e3 * len(gcs) / max(jobs, 1), 2),
        "gc_ms_per_1k_jobs": round(1e3 * 1e3 * sum(e[2] - e[1] for e in gcs) / max(jobs, 1), 3),
    }


FIGURES = ["value", "workers_cpu_pct", "redis_cpu_pct", "claims", "jobs_per_claim",
           "asked_per_claim", "held_at_claim_p50", "claim_round_trip_ms_p50",
           "ack_round_trip_ms_p50", "handover_empty_pct", "gc_passes_per_1k_jobs",
           "gc_ms_per_1k_jobs"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--tree", action="append", type=lambda t: Path(t).resolve())
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    trees = args.tree or [Path(__file__).resolve().parent.parent]
    rows = common.alternate(trees, args.rounds, lambda tree: one_drain(tree, args.n))
    for tree, results in rows.items():
        for r in results:
            print(json.dumps({"tree": str(tree), **{k: r.get(k) for k in FIGURES}}), flush=True)
    print(f"\n| figure (median of {args.rounds}) | " + " | ".join(t.name for t in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for key in FIGURES:
        cells = []
        for tree in trees:
            values = [r[key] for r in rows[tree] if r.get(key) is not None]
            cells.append(f"{statistics.median(values):,.2f}" if values else "-")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

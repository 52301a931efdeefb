"""Where a bulk enqueue's client CPU goes, stage by stage, for source trees in
the same run, with no Redis: App.enqueue_many's own steps on 20,000 no-op
jobs (the requests built beforehand), each timed on its own:

- prepare: Producer.prepare_many (checks, ids, payload envelopes);
- group: the jobs by physical queue;
- args: enqueue.lua's arguments, a call per chunk of 500;
- answer: the EnqueuedJob of each job from a reply that created them all.

Each tree runs in a process of its own, rounds alternating (A, B, A, B ...);
per stage, the median over the rounds of each round's median of 7 batches,
in microseconds per job.

  git worktree add /tmp/lq-old <commit>
  python benchmarks/bulk_stages.py --tree /tmp/lq-old --tree . [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import alternate, last_json, run_in_tree, tree_args

STAGES = ("prepare", "group", "args", "answer")

CLIENT = """
import inspect, json, statistics, time
from leasequeue import App, JobRequest
from leasequeue.producer import chunks
from leasequeue.store.scripts import enqueue_args

app = App("redis://127.0.0.1:1/0", prefix="stages")  # never connects


@app.job()
async def noop() -> None: ...


N = 20_000
producer, settings = app.producer, app.scripts.settings
# Producer.answer takes the chunk's jobs since 2026-12-04 (the prepared batch before)
by_jobs = "jobs" in inspect.signature(producer.answer).parameters
# the App's own end of the call: a C filter since 2026-12-04
finish = "filter(None" in inspect.getsource(App.enqueue_many)
spent = {{stage: [] for stage in {stages!r}}}
for _ in range(7):
    requests = [JobRequest("noop") for _ in range(N)]
    t = time.perf_counter()
    prepared = producer.prepare_many(requests)
    spent["prepare"].append(time.perf_counter() - t)
    t = time.perf_counter()
    groups = producer.group(prepared)
    spent["group"].append(time.perf_counter() - t)
    t = time.perf_counter()
    batches = {{}}
    for physical, indexes in groups.items():
        for k, part in enumerate(chunks(indexes)):
            jobs = batches[physical, k] = [prepared[i][1] for i in part]
            enqueue_args(settings, jobs)
    spent["args"].append(time.perf_counter() - t)
    answers = [None] * N
    t = time.perf_counter()
    for physical, indexes in groups.items():
        for k, part in enumerate(chunks(indexes)):
            producer.answer(answers, batches[physical, k] if by_jobs else prepared, physical,
                            part, [(True, "queued")] * len(part))
    done = list(filter(None, answers)) if finish else [a for a in answers if a is not None]
    spent["answer"].append(time.perf_counter() - t)
    assert len(done) == N
print(json.dumps({{k: statistics.median(v) / N * 1e6 for k, v in spent.items()}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    tree_args(ap, rounds=3)
    args = ap.parse_args()
    trees: list[Path] = args.tree
    rows: dict[Path, list[dict[str, float]]] = alternate(
        trees, args.rounds, lambda tree: last_json(run_in_tree(tree, CLIENT.format(stages=STAGES))))
    print("| tree | " + " | ".join(f"{s} µs/job" for s in STAGES) + " | all |")
    print("|---|" + "---:|" * (len(STAGES) + 1))
    for tree, runs in rows.items():
        med = [statistics.median(r[s] for r in runs) for s in STAGES]
        print(f"| {tree} | " + " | ".join(f"{m:.2f}" for m in med) + f" | {sum(med):.2f} |")


if __name__ == "__main__":
    main()

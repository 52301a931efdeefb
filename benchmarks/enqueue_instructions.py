"""Where Redis spends a one-job enqueue, counted in instructions by
valgrind's callgrind (repeatable, whatever else the machine does): one
redis-server under callgrind; each variant script is called N times with one
fresh job each, the counters dumped (callgrind_control) before and after, so
a figure is Redis's instructions per call (the command's parsing and reply
included, a little of serverCron too). Each variant starts from empty keys
and makes 300 calls before the counted ones (the hashes and the sorted set
past their small encodings, as in a queue in use).

Variants, from the tree given (its lua/ and loader):
- an empty script (``return 1``): EVALSHA's own cost;
- bee-queue's shape (HEXISTS, HSET, LPUSH: what its addJob does);
- enqueue.lua cut before each of its steps (``return 1`` there), then whole:
  each step's cost is the difference to the line above;
- enqueue_one.lua whole (what a one-job enqueue of such a job calls since
  it came), with its own four KEYS and seven ARGV, and ``return 1`` with those.

  python benchmarks/enqueue_instructions.py [--tree PATH] [--n 1000]

Needs valgrind (apt-get install valgrind)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import redis as redis_sync

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from instructions import redis_under_callgrind  # noqa: E402

KEYS = [f"{{bench:q}}:{k}" for k in
        ("jobs", "payloads", "ready", "scheduled", "stats", "wake", "events", "line")]
PAYLOAD = b"\x94\x01\xa0\xa0\x80"  # an envelope [1, '', '', {}]: a no-op job's
# enqueue.lua's ARGV for one job: settings (no audit trail), then its run's
# head (count, name, delay, priority, budgets, park group, the payload), then its id
HEAD: list[str | int | bytes] = [0, 0, 1000, 1, "noop", 0, 0, 0, 0, "", PAYLOAD]
# enqueue_one.lua's: the jobs, stats, line and wake keys; wake cap, name, budgets,
# park group, payload, then the id
LINE_KEYS = [f"{{bench:q}}:{k}" for k in ("jobs", "stats", "line", "wake")]
LINE_HEAD: list[str | int | bytes] = [1000, "noop", 0, 0, "", PAYLOAD]
WARM = 300  # calls before the counted ones
BEE = ("if redis.call('HEXISTS', KEYS[1], ARGV[12]) == 1 then return nil end\n"
       "redis.call('HSET', KEYS[1], ARGV[12], ARGV[11])\n"
       "redis.call('LPUSH', KEYS[6], ARGV[12])\n"
       "return ARGV[12]")
# enqueue.lua's steps for one job, by the line each begins with; a cut inside
# the one-job block (indented) closes that block after its `return 1`
CUTS = ("local now_text = ms_text(", "if #ARGV == 3 + RUN_HEAD + 1 then",
        "  local seq = redis.call('HINCRBY'", "  local state, ready_ms, due_ms",
        "  local head, tail = record_around_seq", "  local inline = #payload",
        "  if redis.call('HSETNX'", "  if not inline then", "  local prio = ARGV",
        "  if audit_all then", "  redis.call('HINCRBY', stats_key, 'enqueued'",
        "  wake(wake_key, 1, wake_cap)", "  return state")


Variant = tuple[str, str, list[str], list[str | int | bytes]]  # label, text, KEYS, ARGV but the id


def variants(tree: Path) -> list[Variant]:
    sys.path.insert(0, str(tree))
    from leasequeue.store.loader import script_source

    src = script_source("enqueue", shebang=True)
    lines = src.split("\n")
    out: list[Variant] = [("empty script (return 1)", "return 1", KEYS, HEAD),
                          ("bee-queue's shape: HEXISTS, HSET, LPUSH", BEE, KEYS, HEAD)]
    for cut in CUTS:
        at = next(i for i, line in enumerate(lines) if line.startswith(cut))
        label = ("enqueue.lua: its helpers only" if cut == CUTS[0]
                 else f"enqueue.lua up to `{cut}`")
        close = "\nreturn 1\nend\nreturn 1" if cut.startswith(" ") else "\nreturn 1"
        out.append((label, "\n".join(lines[:at]) + close, KEYS, HEAD))
    out.append(("enqueue.lua whole", src, KEYS, HEAD))
    if (tree / "lua" / "enqueue_one.lua").exists():
        out.append(("empty script, enqueue_one.lua's KEYS and ARGV", "return 1", LINE_KEYS,
                    LINE_HEAD))
        out.append(("enqueue_one.lua whole", script_source("enqueue_one", shebang=True),
                    LINE_KEYS, LINE_HEAD))
    return out


def measure(scripts: list[Variant], n: int, warm: int = WARM) -> list[tuple[str, float]]:
    figures = []
    # hz 1: serverCron, which runs by the wall clock, 50x slower under callgrind,
    # adds less to the counts
    with redis_under_callgrind("--hz", "1") as (port, count):
        client = redis_sync.Redis(port=port)
        for label, text, keys, head in scripts:
            sha = client.script_load(text)
            client.delete(*KEYS)  # each variant from empty keys
            for _ in range(warm):  # past the small encodings (128 entries), as a queue is
                client.evalsha(sha, len(keys), *keys, *head, os.urandom(14).hex())
            client.delete(KEYS[5])
            ids = [os.urandom(14).hex() for _ in range(n)]
            count()
            for job_id in ids:
                client.evalsha(sha, len(keys), *keys, *head, job_id)
            figures.append((label, count() / n))
        client.close()
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", default=str(HERE.parent), help="the source tree (lua/, loader)")
    ap.add_argument("--n", type=int, default=1000, help="calls per variant")
    ap.add_argument("--warm", type=int, default=WARM,
                    help="calls before the counted ones (over 512: the jobs hash past its "
                         "listpack, whose HSETNX scans the whole hash)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    figures = measure(variants(Path(args.tree).resolve()), args.n, args.warm)
    print(f"Redis instructions per one-job enqueue call (callgrind), tree {args.tree}, "
          f"{args.n} calls per variant after {args.warm}")
    print("| variant | instructions per call | over the line above |")
    print("|---|---:|---:|")
    previous = None
    for label, value in figures:
        step = "" if previous is None else f"{value - previous:+,.0f}"
        print(f"| {label} | {value:,.0f} | {step} |")
        previous = value


if __name__ == "__main__":
    main()

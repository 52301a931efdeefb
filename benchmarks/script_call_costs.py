"""What a script call costs Redis before and around its own work, counted by
callgrind on a redis-server of its own (instructions per call, N calls each):

- EVALSHA of `return 1` with no arguments, with claim.lua's 13 keys and 9
  arguments, and with 13 plain arguments;
- claim.lua cut short at points (the helpers of _lib.lua defined, then
  the call's locals and now_ms, then TIME alone), with the claim's keys and
  arguments: where a small claim's fixed cost goes;
- the whole claim on an empty queue, the claim of one job, the ack of one
  job, and a PING, through the package;
- per job of a bulk enqueue: enqueue.lua, a script that only writes the
  three entries, and the same writes as plain commands.

  python benchmarks/script_call_costs.py [--n 400]

Needs valgrind (apt-get install valgrind)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lq_bench
import redis
from instructions import redis_under_callgrind

from leasequeue import App, JobRequest
from leasequeue.store.loader import script_source
from leasequeue.store.record import split_record


def claim_call(app: App) -> tuple[list[bytes], list[Any]]:
    qk = app.keys(lq_bench.QUEUE)
    args, claim_key = app.scripts._claim_args(qk, 1, 30_000, "w", 1, "c1")
    return app.scripts._call_keys("claim", qk, (claim_key,)), list(args)


def raw_calls(port: int, count: Any, n: int) -> None:
    keys, args = claim_call(App("redis://127.0.0.1:1/0", prefix="lq"))
    source = script_source("claim", shebang=True)
    lib = source[:source.index("local ready_key, scheduled_key")]
    scripts = {
        "return 1, no keys or arguments": ("return 1", False),
        "return 1, 13 plain arguments": ("return 1", None),
        "return 1, the claim's 13 keys and 9 arguments": ("return 1", True),
        "_lib.lua's helpers defined, then return 1": (lib + "\nreturn 1", True),
        "... and redis.call('TIME')": (lib + "\nlocal t = redis.call('TIME') return 1", True),
        "... now_ms() instead": (lib + "\nlocal now = now_ms() return 1", True),
        "... and two int()": (lib + "\nlocal now = now_ms() local a = int(now) "
                              "local b = int(now + 30000) return 1", True),
    }
    r = redis.Redis(port=port)
    count()
    for name, (text, with_claim) in scripts.items():
        sha = r.script_load(text)
        count()
        for _ in range(n):
            if with_claim:
                r.evalsha(sha, len(keys), *keys, *args)
            elif with_claim is None:
                r.evalsha(sha, 0, *(f"{{lq:default}}:k{i}" for i in range(13)))
            else:
                r.evalsha(sha, 0)
        print(f"| {name} | {count() / n:,.0f} |")
    r.close()


async def package_calls(port: int, count: Any, n: int) -> None:
    app = lq_bench._app(f"redis://127.0.0.1:{port}/0")
    qk = app.keys(lq_bench.QUEUE)
    await app.enqueue_many([JobRequest("noop") for _ in range(10)])  # scripts loaded
    for i in range(10):
        batch = await app.scripts.claim(qk, 1, 30_000, "w", 1, f"warm{i}")
        await lq_bench.ack_all(app, qk, batch.jobs, 86_400_000)
    count()
    for i in range(n):
        await app.scripts.claim(qk, 1, 30_000, "w", 1, f"empty{i}")
    print(f"| claim.lua, an empty queue | {count() / n:,.0f} |")
    await app.enqueue_many([JobRequest("noop") for _ in range(n)])
    count()
    held = []
    for i in range(n):
        held += (await app.scripts.claim(qk, 1, 30_000, "w", 1, f"one{i}")).jobs
    print(f"| claim.lua, one job | {count() / n:,.0f} |")
    for job in held:
        await lq_bench.ack_all(app, qk, [job], 86_400_000)
    print(f"| ack.lua, one job | {count() / n:,.0f} |")
    for _ in range(n):
        await app.redis.ping()
    print(f"| PING | {count() / n:,.0f} |")
    await app.close()


BULK = 5_000  # jobs in the bulk rows, 500 a call
WRITES_ONLY = """
local recs, pls, zs = {}, {}, {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  recs[#recs + 1] = id; recs[#recs + 1] = 'x' .. ARGV[i + 1]
  pls[#pls + 1] = id; pls[#pls + 1] = ARGV[i + 1]
  zs[#zs + 1] = i; zs[#zs + 1] = id
end
redis.call('HSET', KEYS[1], unpack(recs))
redis.call('HSET', KEYS[2], unpack(pls))
redis.call('ZADD', KEYS[3], unpack(zs))
return 1"""


async def bulk_writes(port: int, count: Any) -> None:
    """Per job of a bulk enqueue: enqueue.lua through the package, a script
    that only writes the three entries, and the same writes as commands."""
    url = f"redis://127.0.0.1:{port}/0"
    app = App(url, prefix="bulk")
    await app.enqueue_many([JobRequest("noop") for _ in range(10)])  # scripts loaded
    count()
    await app.enqueue_many([JobRequest("noop") for _ in range(BULK)])
    print(f"| a job of enqueue_many, enqueue.lua (500 a call) | {count() / BULK:,.0f} |")
    qk = app.keys("default")
    r = redis.Redis(port=port)
    record = next(iter(r.hvals(qk.jobs)))
    record, payload = split_record(record)  # the payload is kept inside the record
    await app.close()
    ids = [os.urandom(14).hex() for _ in range(BULK)]
    sha = r.script_load(WRITES_ONLY)
    count()
    pipe = r.pipeline(transaction=False)
    for first in range(0, BULK, 500):
        part = ids[first:first + 500]
        pipe.evalsha(sha, 3, "w:jobs", "w:payloads", "w:ready",
                     *(v for job_id in part for v in (job_id, payload)))
    pipe.execute()
    print(f"| a job of a script that only writes its three entries (500 a call) "
          f"| {count() / BULK:,.0f} |")
    pipe = r.pipeline(transaction=False)
    for first in range(0, BULK, 500):
        part = ids[first:first + 500]
        pipe.hset("c:jobs", mapping={job_id: record for job_id in part})
        pipe.hset("c:payloads", mapping={job_id: payload for job_id in part})
        pipe.zadd("c:ready", {job_id: 1e15 + k for k, job_id in enumerate(part)})
    pipe.execute()
    print(f"| a job of the same writes as HSET, HSET, ZADD commands (500 a call) "
          f"| {count() / BULK:,.0f} |")
    r.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400, help="calls of each kind")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    print("| call | Redis instructions per call |")
    print("|---|---:|")
    with redis_under_callgrind() as (port, count):
        raw_calls(port, count, args.n)
        asyncio.run(package_calls(port, count, args.n))
        asyncio.run(bulk_writes(port, count))


if __name__ == "__main__":
    main()

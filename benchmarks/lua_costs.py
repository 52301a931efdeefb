"""Where a script call's server time goes, measured on this harness's own
redis-server (INFO commandstats, usec per EVALSHA):

1. The prelude: each hot script with its body replaced by ``return 1``, so
   only the _lib.lua helpers it includes run (Redis runs a script's whole
   text on every call), against an empty script. This is what Redis
   Functions (helpers defined once per library) could save per call.
2. A bulk enqueue's work per job, one part at a time: 500-job calls that do
   only that part (read the arguments, HMGET the ids, HSET the records,
   HSET the payloads, ZADD the ready set, build the records, build the
   reply), and the whole enqueue.lua.

Run: python benchmarks/lua_costs.py [calls per figure] > benchmarks/results/lua_costs.txt
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from redis_server import RedisServer  # noqa: E402

from leasequeue.store.loader import script_source  # noqa: E402

HOT = ("enqueue", "claim", "start", "renew", "ack", "fail")
BATCH = 500
ENQUEUE_KEYS = ["{b:q}:jobs", "{b:q}:payloads", "{b:q}:ready", "{b:q}:scheduled", "{b:q}:stats",
                "{b:q}:wake", "{b:q}:events", "{b:q}:line"]
# a no-op job's record and envelope, as enqueue.lua and Producer.prepare write them
RECORD = b"2|queued|0|0|0|0|0|0|0|0|0|1234567|1764500000000|1764500000000|0|0|0|noop||"
PAYLOAD = b"\x94\x01\xd9\x20" + b"a" * 32 + b"\xa0\x80"
PAIRS = "local t = {} for i = 1, #ARGV, 2 do t[#t + 1] = ARGV[i] t[#t + 1] = ARGV[i + 1] end "
PARTS = {
    "read the arguments": "local t = {} for i = 1, #ARGV, 2 do t[#t + 1] = ARGV[i] end",
    "HMGET the ids": "local t = {} for i = 1, #ARGV, 2 do t[#t + 1] = ARGV[i] end "
                     "redis.call('HMGET', KEYS[1], unpack(t))",
    "HSET the records": PAIRS + "redis.call('HSET', KEYS[1], unpack(t))",
    "HSET the payloads": PAIRS + "redis.call('HSET', KEYS[2], unpack(t))",
    "ZADD the ready set": "local t = {} for i = 1, #ARGV, 2 do "
                          "t[#t + 1] = string.format('%d', 1000000 + i) t[#t + 1] = ARGV[i] end "
                          "redis.call('ZADD', KEYS[3], unpack(t))",
    "build the records": "local t = {} for i = 1, #ARGV, 2 do t[#t + 1] = '2|queued|0|0|0|0|0|' "
                         "..'0|0|0|0|' .. string.format('%d', i) .. '|1764500000000|17645000000'"
                         "..'00|0|0|0|noop||' end",
    "build the reply": "local t = {} for i = 1, #ARGV, 2 do t[#t + 1] = 1 "
                       "t[#t + 1] = 'queued' end return t",
}


def usec_per_call(r: redis.Redis, sha: str, calls: list[list[object]], keys: list[str]) -> float:
    r.config_resetstat()
    pipe = r.pipeline(transaction=False)
    for i, args in enumerate(calls):
        pipe.evalsha(sha, len(keys), *keys, *args)
        if i % 50 == 49:
            pipe.execute()
    pipe.execute()
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


def prelude_costs(r: redis.Redis, n: int) -> None:
    print(f"1. Per call: the prelude (the helpers a script includes) against an empty "
          f"script, median of 5 x {n} calls")
    empty = r.script_load("return 1")
    base = statistics.median(usec_per_call(r, empty, [[]] * n, []) for _ in range(5))
    print(f"   empty script: {base:.2f} us/call")
    for name in HOT:
        source = script_source(name)
        body = (HERE.parent / "lua" / f"{name}.lua").read_text()
        lib = source[:source.index(body)]
        sha = r.script_load(lib + "\nreturn 1")
        cost = statistics.median(usec_per_call(r, sha, [[]] * n, []) for _ in range(5))
        print(f"   {name:8} prelude: {cost:.2f} us/call ({cost - base:+.2f} over empty; "
              f"{lib.count('local function')} helpers, {len(lib):,} characters)")


def enqueue_parts(r: redis.Redis, calls: int) -> None:
    print(f"\n2. Per job in a {BATCH}-job enqueue call (no-op jobs, fresh ids, {calls} calls "
          "per figure, median of 3; each part alone, so a part's figure includes the call's "
          "fixed cost over 500 jobs)")

    def batches(value: bytes) -> list[list[object]]:
        return [[x for _ in range(BATCH) for x in (os.urandom(16).hex(), value)]
                for _ in range(calls)]

    for label, body in PARTS.items():
        sha = r.script_load(body + " return 1" if "return" not in body else body)
        value = RECORD if "records" in label else PAYLOAD
        figures = []
        for _ in range(3):
            r.flushdb()
            figures.append(usec_per_call(r, sha, batches(value), ENQUEUE_KEYS) / BATCH)
        print(f"   {label:20} {statistics.median(figures):.2f} us/job")
    sha = r.script_load(script_source("enqueue"))
    figures = []
    for _ in range(3):
        r.flushdb()
        # one run of no-op jobs: count, name, delay, priority, budgets, grp, then id, payload
        whole = [[0, 0, 1000, BATCH, "noop", 0, 0, 0, 0, "",
                  *[x for _ in range(BATCH) for x in (os.urandom(16).hex(), PAYLOAD)]]
                 for _ in range(calls)]
        figures.append(usec_per_call(r, sha, whole, ENQUEUE_KEYS) / BATCH)
    print(f"   {'enqueue.lua whole':20} {statistics.median(figures):.2f} us/job")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with RedisServer() as srv:
        r = redis.Redis.from_url(srv.url)
        info = r.info("server")
        print(f"Redis {info['redis_version']}, {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.2f}\n")
        prelude_costs(r, 100 * n)
        enqueue_parts(r, n)
        r.close()


if __name__ == "__main__":
    main()

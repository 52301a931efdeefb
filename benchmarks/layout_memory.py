"""Where a queued job's bytes go, and which layout would take it below
bee-queue's: 100,000 queued no-op jobs written straight into Redis in each
candidate layout (no leasequeue code, only its record and payload texts), on
a flushed redis-server, then INFO's used_memory per job and the Redis CPU
per job of the writes (one Lua call per 500 jobs, as enqueue.lua's batch
path writes: one HSET, ZADD or RPUSH per structure per call, the argument
lists built in Lua). Each layout is written --rounds times (flushed between,
layouts interleaved); figures are medians.

The layouts:
  today           the record and the payload in two hashes, the place in
                  line in a sorted set (priority, then FIFO), 28-character ids
  payload inline  the payload appended to the record: one hash entry
  ... 16-char ids the same with 16-character ids (96 random bits, base64url)
  ... 14-char ids and with 14 (84 bits): the longest id whose string Redis
                  allocates in 16 bytes (a 1-byte header and a NUL), against
                  32 for 16 and 28 characters
  ready list      the place in line in a list (one per priority level)
  both            the payload inline and a ready list
  both, 16-char   ... with 16-character ids (96 random bits, base64url)
  both, 8-char    ... with 8-character ids (a counter in base 62: what a
                  per-queue sequence would give)
  ... 54-char     ... and a record cut to 54 characters (today's is 69), so
                  that the record, a separator and the payload fit in 64
                  bytes of allocation instead of 80
  bee-queue shape an integer id -> its job's JSON in a hash, a list
                  (bee-queue 2.0's addJob for a no-op job)

  python benchmarks/layout_memory.py
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass

import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import redis_cpu_seconds
from redis_server import RedisServer

CHUNK = 500
NOW = 1796184095181
# a queued no-op job's record and payload as enqueue.lua writes them today
# (record format 2, name "noop"; the empty envelope, 5 bytes)
RECORD = "2|queued|0|0|0|0|0|0|0|0|0|{seq}|{now}|{now}|0|0|0|noop||"
ENVELOPE = b"\x94\x01\xa0\xa0\x80"
BEE_JOB = ('{{"data":{{}},"options":{{"timestamp":{now},"stacktraces":[]}},'
           '"status":"created"}}')
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def writes(payloads: bool, ready_list: bool) -> str:
    """The Lua of one call per chunk: KEYS jobs, payloads, ready; ARGV the
    envelope (every payload entry's value), then triples (id, the jobs hash
    entry's value, seq as the score). ``payloads``: the payload in a hash of
    its own (else inside the record); ``ready_list``: the place in line in a
    list (else a sorted set)."""
    place = ("ready[#ready + 1] = ARGV[i]" if ready_list
             else "ready[#ready + 1] = ARGV[i + 2]; ready[#ready + 1] = ARGV[i]")
    lines = ["local recs, envs, ready = {}, {}, {}",
             "for i = 2, #ARGV, 3 do",
             "  recs[#recs + 1] = ARGV[i]; recs[#recs + 1] = ARGV[i + 1]",
             *(["  envs[#envs + 1] = ARGV[i]; envs[#envs + 1] = ARGV[1]"] if payloads else []),
             f"  {place}",
             "end",
             "redis.call('HSET', KEYS[1], unpack(recs))",
             *(["redis.call('HSET', KEYS[2], unpack(envs))"] if payloads else []),
             f"redis.call('{'RPUSH' if ready_list else 'ZADD'}', KEYS[3], unpack(ready))"]
    return "\n".join(lines) + "\n"


SCRIPTS = {
    "two hashes + zset": writes(payloads=True, ready_list=False),
    "one hash + zset": writes(payloads=False, ready_list=False),
    "two hashes + list": writes(payloads=True, ready_list=True),
    "one hash + list": writes(payloads=False, ready_list=True),
}


@dataclass(frozen=True)
class Layout:
    name: str
    script: str  # a key of SCRIPTS
    job_id: Callable[[int], str]
    value: Callable[[int], bytes]  # the hash entry's value for job seq


def hex28(seq: int) -> str:
    return os.urandom(14).hex()


def b64_16(seq: int) -> str:
    return base64.urlsafe_b64encode(os.urandom(12)).decode()


def b64_14(seq: int) -> str:
    return b64_16(seq)[:14]


def b62(seq: int) -> str:
    out = ""
    seq += 62 ** 7  # 8 characters from the first job on
    while seq:
        seq, r = divmod(seq, 62)
        out = B62[r] + out
    return out


def record(seq: int) -> bytes:
    return RECORD.format(seq=seq, now=NOW).encode()


def inline(seq: int) -> bytes:
    return record(seq) + b"|" + ENVELOPE


LAYOUTS = [
    Layout("today: record, payload, sorted set; 28-char ids", "two hashes + zset", hex28,
           record),
    Layout("payload inline in the record", "one hash + zset", hex28, inline),
    Layout("payload inline, 16-char ids", "one hash + zset", b64_16, inline),
    Layout("payload inline, 14-char ids", "one hash + zset", b64_14, inline),
    Layout("ready in a list", "two hashes + list", hex28, record),
    Layout("payload inline + ready list", "one hash + list", hex28, inline),
    Layout("payload inline + ready list, 16-char ids", "one hash + list", b64_16, inline),
    Layout("payload inline + ready list, 8-char ids", "one hash + list", b62, inline),
    Layout("payload inline + ready list, 8-char ids, a 54-char record", "one hash + list", b62,
           lambda seq: record(seq)[:54] + b"|" + ENVELOPE),
    Layout("bee-queue's shape: integer id -> JSON, list", "one hash + list", str,
           lambda seq: BEE_JOB.format(now=NOW).encode()),
]


def measure(r: redis.Redis, layout: Layout, jobs: int) -> tuple[float, float]:
    """(used_memory bytes per job, Redis CPU µs per job) of one round."""
    r.flushall()
    keys = ["{q}:jobs", "{q}:payloads", "{q}:ready"]
    # every argument list built before the clock starts: only Redis's work counts
    calls = []
    for start in range(0, jobs, CHUNK):
        args: list[bytes | str | int] = [ENVELOPE]
        for seq in range(start + 1, min(start + CHUNK, jobs) + 1):
            args += [layout.job_id(seq), layout.value(seq), seq]
        calls.append(args)
    sha = r.script_load(SCRIPTS[layout.script])  # loaded before the clock starts
    before, cpu_before = int(r.info("memory")["used_memory"]), redis_cpu_seconds(r)
    for args in calls:
        r.evalsha(sha, len(keys), *keys, *args)
    cpu_after, after = redis_cpu_seconds(r), int(r.info("memory")["used_memory"])
    return (after - before) / jobs, (cpu_after - cpu_before) * 1e6 / jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with RedisServer() as server:
        r = redis.Redis.from_url(server.url)
        got: dict[str, list[tuple[float, float]]] = {layout.name: [] for layout in LAYOUTS}
        for _ in range(args.rounds):
            for layout in LAYOUTS:
                got[layout.name].append(measure(r, layout, args.jobs))
        print(f"Redis {r.info('server')['redis_version']}, {args.jobs:,} queued no-op jobs "
              f"per layout, {args.rounds} rounds (interleaved), medians")
        print("| layout | used_memory B / queued job | Redis CPU µs / job written |")
        print("|---|---:|---:|")
        for layout in LAYOUTS:
            mem = statistics.median(m for m, _ in got[layout.name])
            cpu = statistics.median(c for _, c in got[layout.name])
            print(f"| {layout.name} | {mem:,.1f} | {cpu:.2f} |")
        r.close()


if __name__ == "__main__":
    main()

"""The physical ceiling: redis-benchmark running a claim-shaped Lua script
(ZPOPMIN + HINCRBY + ZADD on one hash-tagged key pair) on the harness's
Redis, so our figures can be read against what this Redis on this machine
can do at all. The popped member goes back at the end of the set, so the
set keeps its size and every call does the same work.

  python ceiling.py --port P [--quick]   -> JSON lines, one per run
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
from typing import Any

READY, STATS = "{bench:ceiling}:ready", "{bench:ceiling}:stats"
SCRIPT = """
local popped = redis.call('ZPOPMIN', KEYS[1])
local seq = redis.call('HINCRBY', KEYS[2], 'seq', 1)
if popped[1] then
  redis.call('ZADD', KEYS[1], seq + 1000000, popped[1])
end
return popped[1]
"""
FILL = "for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], i, 'job' .. i) end"
SET_SIZE = 1000

# (label, clients, pipeline depth, requests in full mode)
RUNS = [
    ("evalsha_c50", 50, 1, 150_000),
    ("evalsha_c50_p16", 50, 16, 400_000),
    ("evalsha_c1", 1, 1, 10_000),  # one client: the round-trip floor of one call
]


def cli(port: int, *args: str) -> str:
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.strip()


def bench(port: int, sha: str, clients: int, pipeline: int, requests: int) -> dict[str, Any]:
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", str(clients), "-P", str(pipeline),
         "-n", str(requests), "--csv", "EVALSHA", sha, "2", READY, STATS],
        capture_output=True, text=True, timeout=120, check=True,
    )
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    if not rows:
        raise RuntimeError(f"no CSV from redis-benchmark: {out.stdout[-300:]} {out.stderr[-300:]}")
    row = rows[-1]
    return {"value": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]),
            "p99_ms": float(row["p99_latency_ms"]), "clients": clients, "pipeline": pipeline,
            "requests": requests}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.port == 6379:
        raise SystemExit("refusing the shared Redis on 6379")
    if shutil.which("redis-benchmark") is None:
        print(json.dumps({"metric": "ceiling", "error": "redis-benchmark is not installed"}))
        return
    cli(args.port, "DEL", READY, STATS)
    cli(args.port, "EVAL", FILL, "1", READY, str(SET_SIZE))
    sha = cli(args.port, "SCRIPT", "LOAD", SCRIPT)
    for label, clients, pipeline, requests in RUNS:
        n = requests // 10 if args.quick else requests
        try:
            result = bench(args.port, sha, clients, pipeline, n)
            print(json.dumps({"metric": label, **result}), flush=True)
        except (subprocess.SubprocessError, RuntimeError, KeyError, ValueError) as exc:
            print(json.dumps({"metric": label, "error": str(exc)[:300]}), flush=True)
    cli(args.port, "DEL", READY, STATS)


if __name__ == "__main__":
    main()

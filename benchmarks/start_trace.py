"""Where Redis, a fresh client process and a busy neighbour run in the
client's first 5,000 calls, from the kernel's scheduler events
(sched_trace.py): the busy-host case of the README ("Why `App`'s one
enqueue per call moves beside the load"), where a fresh process of `App`
usually began with Redis on the load's CPU.

Beside a process busy half the time (duty_load.py), each rep starts three
fresh producers in turn, none warmed up: `App` on asyncio's loop with its
reply spin, the same with the spin off (StoreSettings(reply_spin_us=0)),
and bee-queue (node/one_call.mjs --warmup 0). Per producer it prints how
many times each of Redis, the load and the client changed CPU while the
client ran, and for `App` the µs a call of each 1,000 calls. ``--pause S``:
`App` sleeps S seconds between its imports and its first call.

  python benchmarks/start_trace.py [--reps 4] [--pause 0.5]

Needs root and tracefs (sched_trace.py), and node for bee-queue.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import duty_load
import sched_trace
from redis_server import RedisServer

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = r'''
import asyncio, json, sys, time
import leasequeue as lq
from leasequeue.store.settings import StoreSettings

async def main():
    time.sleep(float(sys.argv[3]))  # --pause: the start-up's CPU burst decays first
    settings = None if sys.argv[2] == "spin" else StoreSettings(reply_spin_us=0)
    app = lq.App(sys.argv[1], prefix="start", settings=settings)
    app.job(lambda ctx: None, name="noop")
    t = time.monotonic()
    for i in range(1, 5001):
        await app.enqueue("noop")
        if i % 1000 == 0:
            now = time.monotonic()
            print(json.dumps({"calls": i, "us": (now - t) / 1000 * 1e6}), flush=True)
            t = now
    await app.close()

asyncio.run(main())
'''


def one(trace: sched_trace.SchedTrace, redis: RedisServer, load: int,
        producer: str, pause: float) -> str:
    assert redis.proc is not None
    trace.begin()
    known = {pid: (time.monotonic(), sched_trace.last_cpu(pid)) for pid in (redis.proc.pid, load)}
    t0 = time.monotonic()
    if producer == "bee-queue":
        argv = [shutil.which("node") or "node", "one_call.mjs", "--port", str(redis.port),
                "--calls", "5000", "--rounds", "1", "--warmup", "0"]
        cwd = os.path.join(HERE, "node")
    else:
        argv = [sys.executable, "-c", CLIENT, redis.url, producer, str(pause)]
        cwd = HERE
    out = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, check=True).stdout
    t1 = time.monotonic()
    p = sched_trace.parse(trace.end(), 0, known)
    client = min((pid for pid, at in p.execs.items() if at >= t0), key=p.execs.__getitem__)

    def moves(tid: int) -> int:
        return sum(t0 < t <= t1 for t in p.cpus.get(tid, ([], []))[0])

    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    rate = " ".join(f"{r['us']:.0f}" for r in rows if "us" in r)
    rate = (f"µs a call by 1,000: {rate}" if rate else
            f"calls/s: {rows[0]['calls_per_s']:,.0f}" if rows else "?")
    return (f"CPU changes while it ran: Redis {moves(redis.proc.pid):2}, "
            f"the load {moves(load):2}, the client {moves(client):2} | {rate}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds `App` sleeps after its imports, before its first call")
    args = ap.parse_args()
    redis = RedisServer()
    redis.start()
    loads = duty_load.start(0.5, 1)
    trace = sched_trace.SchedTrace()
    try:
        if not trace.open():
            raise SystemExit("no tracefs instance (root and tracefs needed)")
        time.sleep(1.0)
        for rep in range(args.reps):
            for producer in ("spin", "nospin", "bee-queue"):
                label = {"spin": "App", "nospin": "App, no spin"}.get(producer, producer)
                print(f"rep {rep + 1} {label:13} "
                      + one(trace, redis, loads[0].pid, producer, args.pause), flush=True)
    finally:
        trace.close()
        duty_load.stop(loads)
        redis.stop()


if __name__ == "__main__":
    main()

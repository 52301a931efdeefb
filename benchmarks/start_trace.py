"""Where Redis, a fresh client process and a busy neighbour run in the
client's first 5,000 calls, from the kernel's scheduler events
(sched_trace.py): the busy-host case of benchmarks/STANDING.md ("Why
`App`'s one enqueue per call moves beside the load"), where a fresh
process of `App` usually began with Redis on the load's CPU.

Beside a process busy half the time (duty_load.py), each rep starts three
fresh producers in turn, none warmed up: `App` on asyncio's loop with its
reply spin, the same with the spin off (StoreSettings(reply_spin_us=0)),
and bee-queue (node/one_call.mjs --warmup 0). Per producer it prints how
many times each of Redis, the load and the client changed CPU during the
client's 5,000 calls, its calls/s, and for `App` the µs a call of each
1,000 calls. ``--pause S``: each producer sleeps S seconds after its
imports: `App` before it makes its App (it connects at its first call,
inside its timed calls), bee-queue after making its queue and before
waiting for it to be ready (untimed).

  python benchmarks/start_trace.py [--reps 4] [--pause 0.5]

Needs root and tracefs (sched_trace.py), and node for bee-queue.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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
    start = t = time.monotonic()
    for i in range(1, 5001):
        await app.enqueue("noop")
        if i % 1000 == 0:
            now = time.monotonic()
            print(json.dumps({"calls": i, "us": (now - t) / 1000 * 1e6}), flush=True)
            t = now
    print(json.dumps({"calls_per_s": 5000 / (t - start), "mono": [start, t]}), flush=True)
    await app.close()

asyncio.run(main())
'''


def one(trace: sched_trace.SchedTrace, redis: RedisServer, load: int,
        producer: str, pause: float) -> str:
    """One fresh producer's 5,000 calls: how many times Redis, the load and
    the client changed CPU during them, and the client's pace."""
    assert redis.proc is not None
    known = trace.begin((redis.proc.pid, load))
    if producer == "bee-queue":
        argv = [shutil.which("node") or "node", "one_call.mjs", "--port", str(redis.port),
                "--calls", "5000", "--rounds", "1", "--warmup", "0", "--pause", str(pause)]
        cwd = os.path.join(HERE, "node")
    else:
        argv = [sys.executable, "-c", CLIENT, redis.url, producer, str(pause)]
        cwd = HERE
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=cwd)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{producer} exited {proc.returncode}")
    p = sched_trace.parse(trace.end(), proc.pid, known)
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    t0, t1 = next(r["mono"] for r in rows if "mono" in r)  # the 5,000 calls
    redis_moves, load_moves, client_moves = (p.moves(tid, t0, t1)
                                             for tid in (redis.proc.pid, load, proc.pid))
    pace = " ".join(f"{r['us']:.0f}" for r in rows if "us" in r)
    rate = next(r["calls_per_s"] for r in rows if "calls_per_s" in r)
    return (f"CPU changes during its calls: Redis {redis_moves:2}, the load {load_moves:2}, "
            f"the client {client_moves:2} | {rate:,.0f} calls/s"
            + (f" | µs a call by 1,000: {pace}" if pace else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds each producer sleeps after its imports (docstring)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through the finally below
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

"""Where enqueue -> handler start spends its time, hop by hop (issue 11).

One probe job at a time on an idle worker (concurrency 10, as the e2s
column), with the random 2-12 ms gap between probes that `common.gap`
draws. The producer takes time.time_ns() before its enqueue call and after
it returns; the worker process (a real Worker, its Waker and Scripts wrapped
to take the time) records when its BLPOP on the wake list returned, when the
claim that leased the probe was sent and when its reply was decoded, and the
handler takes the time first thing. Where the claim rides behind the wait
(Scripts.wait_then_claim, since 2026-12-01) the two replies come together:
the wake-up, the claim's send and its reply are one instant, and the two
hops between them are 0. All clocks are the machine's one
wall clock (time.time_ns), so the hops line up across the two processes.

  python benchmarks/e2s_path.py [--probes 600] [--tree PATH] [--loop auto|asyncio|uvloop]

The worker runs on the event loop `leasequeue worker --loop` would pick
(--loop, default auto: uvloop when installed, as the benchmark's workers;
before 2026-12-04 this tool's worker ran on asyncio's loop whatever was
installed). The producer is an App on asyncio's loop, as the e2s column's.

Prints one JSON line per hop (p50, p90, p99 in ms) and a table; for a tree
with the worker runtime's dispatch and executor, a second table splits the
last hop inside the worker (handed over, taken by an executor, decoded,
started, handler), and a third gives Redis's own time per script call of the
run, from its SLOWLOG (every command logged). With --tree the worker and producer import leasequeue
from PATH (to compare a commit)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
from redis_server import RedisServer

LOOPS = ("auto", "asyncio", "uvloop")  # leasequeue.loops.LOOPS (a --tree may predate it)

QUEUE, PREFIX, STAMPS = "path", "lqpath", "lqpath:stamps"
HOPS = [  # (label, from, to)
    ("enqueue call (client: send, Redis, reply)", "t0", "t_enq"),
    ("enqueue sent -> worker's BLPOP returned", "t0", "woken"),
    ("BLPOP returned -> claim sent", "woken", "claim_sent"),
    ("claim round trip (sent -> reply decoded)", "claim_sent", "claim_reply"),
    ("claim reply -> handler start", "claim_reply", "start"),
    ("total: enqueue sent -> handler start", "t0", "start"),
]
# inside the worker, claim reply -> handler start (trees with runtime.dispatch
# and runtime.executor): handed to the executors' queue, taken by an
# executor task, payload decoded and Context built, marked started, handler
WORKER_HOPS = [
    ("claim reply -> handed to the executors", "claim_reply", "handed"),
    ("handed -> an executor took it", "handed", "taken"),
    ("taken -> payload decoded, Context built", "taken", "prepared"),
    ("prepared -> started", "prepared", "started"),
    ("started -> handler start", "started", "start"),
]


def worker_main(url: str, loop: str) -> None:
    import redis as redis_sync

    from leasequeue import App, Context, Worker
    from leasequeue.runtime import waker
    from leasequeue.store import scripts

    woken = [0]
    by_job: dict[str, tuple[int, int, int]] = {}
    wait, claim = waker.Waker.wait, scripts.Scripts.claim

    async def timed_wait(self: Any, block_for: float) -> None:
        await wait(self, block_for)
        woken[0] = time.time_ns()

    async def timed_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent = time.time_ns()
        batch = await claim(self, *args, **kwargs)
        reply = time.time_ns()
        for job in batch.jobs:
            by_job[job.id] = (woken[0], sent, reply)
        return batch

    waker.Waker.wait = timed_wait  # type: ignore[method-assign]
    scripts.Scripts.claim = timed_claim  # type: ignore[method-assign]
    behind = getattr(scripts.Scripts, "wait_then_claim", None)
    if behind is not None:  # since 2026-12-01: the claim rides behind the wait
        async def timed_behind(self: Any, *args: Any, **kwargs: Any) -> Any:
            batch = await behind(self, *args, **kwargs)
            reply = time.time_ns()  # the BLPOP's and the claim's replies came together
            for job in batch.jobs:
                by_job[job.id] = (reply, reply, reply)
            return batch

        scripts.Scripts.wait_then_claim = timed_behind  # type: ignore[attr-defined]
    inside = _stamp_the_runtime()
    app = App(url, prefix=PREFIX)
    stamps = redis_sync.Redis.from_url(url)

    async def probe(ctx: Context) -> None:
        start = time.time_ns()
        w, sent, reply = by_job.pop(ctx.job_id, (0, 0, 0))
        stamps.rpush(STAMPS, json.dumps({"woken": w, "claim_sent": sent, "claim_reply": reply,
                                         "start": start, **inside.pop(ctx.job_id, {})}))

    app.job(probe, queue=QUEUE)
    worker = Worker(app, queues=[QUEUE], concurrency=10, handle_signals=True)
    if loop == "uvloop" or (loop == "auto" and importlib.util.find_spec("uvloop")):
        import uvloop

        uvloop.run(worker.run())
    else:
        asyncio.run(worker.run())


# EVALSHA calls told apart by their script's sha, from the tree's own script
# text (until 2026-12-04 by a count of keys written down by hand, which the
# scripts had outgrown: enqueue's and claim's calls went uncounted)
SCRIPT_LABELS = (("enqueue", "enqueue.lua"), ("enqueue_one", "enqueue_one.lua"),
                 ("claim", "claim.lua (every call, found a job or not)"),
                 ("claim_line", "claim_line.lua (every call, found a job or not)"),
                 ("ack", "ack.lua"))


def _script_times(server: RedisServer) -> dict[str, list[int]]:
    """Redis's execution time (µs, no I/O) of each script call the run made,
    by script: what the cold, idle path costs inside Redis."""
    import redis as redis_sync

    client = redis_sync.Redis(port=server.port)
    try:
        times_by_sha = common.slowlog_by_sha(client)
    finally:
        client.close()
    import hashlib

    from leasequeue.store.loader import lua_dir, script_source

    out: dict[str, list[int]] = {}
    for name, label in SCRIPT_LABELS:
        if not (lua_dir() / f"{name}.lua").exists():  # a --tree from before the script
            continue
        sha = hashlib.sha1(script_source(name, shebang=True).encode()).hexdigest()
        out[label] = times_by_sha.get(sha, [])
    return {name: times for name, times in out.items() if times}


def _stamp_the_runtime() -> dict[str, dict[str, int]]:
    """Wrap the worker runtime's hand-off, decode and start to take the time
    (WORKER_HOPS): job id -> stamps. Empty for a tree without those parts."""
    inside: dict[str, dict[str, int]] = {}
    try:
        from leasequeue.runtime import dispatch, executor
    except ImportError:
        return inside
    put_many, get = dispatch.Dispatch.put_many, dispatch.Dispatch.get
    prepare, start = executor.Executor._prepare, executor.Executor._start

    def mark(job_id: str, name: str) -> None:
        inside.setdefault(job_id, {})[name] = time.time_ns()

    def timed_put_many(self: Any, runs: Any) -> None:
        for run in runs:
            mark(run.job.id, "handed")
        put_many(self, runs)

    async def timed_get(self: Any) -> Any:
        run = await get(self)
        mark(run.job.id, "taken")
        return run

    async def timed_prepare(self: Any, run: Any) -> Any:
        out = await prepare(self, run)
        mark(run.job.id, "prepared")
        return out

    async def timed_start(self: Any, run: Any) -> Any:
        out = await start(self, run)
        mark(run.job.id, "started")
        return out

    dispatch.Dispatch.put_many = timed_put_many  # type: ignore[method-assign]
    dispatch.Dispatch.get = timed_get  # type: ignore[method-assign]
    executor.Executor._prepare = timed_prepare  # type: ignore[method-assign]
    executor.Executor._start = timed_start  # type: ignore[method-assign]
    return inside


async def producer(url: str, probes: int) -> list[dict[str, int]]:
    import redis.asyncio as aredis

    from leasequeue import App

    app = App(url, prefix=PREFIX)
    client = aredis.Redis.from_url(url)
    rows: list[dict[str, int]] = []
    totals = [0]  # common.gap's phase rule reads the starts seen so far
    try:
        for i in range(probes + 20):  # the first 20 warm both sides up
            await asyncio.sleep(common.gap(totals))
            t0 = time.time_ns()
            await app.enqueue("probe", queue=QUEUE)
            t_enq = time.time_ns()
            got = await client.blpop([STAMPS], timeout=10)
            if got is None:
                raise RuntimeError("the probe did not start within 10 s")
            row = {"t0": t0, "t_enq": t_enq, **json.loads(got[1])}
            totals.append(row["start"] - t0)
            if i >= 20:
                rows.append(row)
    finally:
        await client.aclose()
        await app.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", nargs="?", default="run", choices=["run", "worker"])
    ap.add_argument("--url")
    ap.add_argument("--probes", type=int, default=600)
    ap.add_argument("--tree", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--loop", choices=LOOPS, default="auto",
                    help="the worker's event loop, as `leasequeue worker --loop`")
    args = ap.parse_args()
    if args.role == "worker":
        worker_main(args.url, args.loop)
        return
    sys.path.insert(0, args.tree)
    server = RedisServer()
    server.start()
    env = {**os.environ, "PYTHONPATH": args.tree}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", "--url",
                             server.url, "--loop", args.loop], env=env,
                            stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        server.cli("CONFIG", "SET", "slowlog-log-slower-than", "0")  # every command
        server.cli("CONFIG", "SET", "slowlog-max-len", "100000")
        server.cli("SLOWLOG", "RESET")
        rows = asyncio.run(producer(server.url, args.probes))
        script_us = _script_times(server)
    finally:
        proc.terminate()
        proc.wait(10)
        server.stop()
    rows = [r for r in rows if r["woken"] and r["claim_sent"]]
    _hop_table(f"hop ({len(rows)} probes)", HOPS, rows, "ms")
    print("\n| Redis's own time per script call, from SLOWLOG (this run) | calls | "
          "p50 µs | p90 µs |")
    print("|---|---:|---:|---:|")
    for name, times in script_us.items():
        times.sort()
        print(f"| {name} | {len(times)} | {times[len(times) // 2]} | "
              f"{times[int(len(times) * 0.9)]} |")
    inside = [r for r in rows if all(k in r for _, a, b in WORKER_HOPS for k in (a, b))]
    if inside:
        print()
        _hop_table(f"inside the worker ({len(inside)} probes)", WORKER_HOPS, inside, "µs")


def _hop_table(title: str, hops: list[tuple[str, str, str]], rows: list[dict[str, int]],
               unit: str) -> None:
    """One Markdown table of p50, p90, p99 per hop (and a JSON line per hop on
    stderr), in ms or µs."""
    scale, digits = (1, 3) if unit == "ms" else (1000, 1)
    print(f"| {title} | p50 {unit} | p90 {unit} | p99 {unit} |")
    print("|---|---:|---:|---:|")
    for label, a, b in hops:
        summary = common.latency_summary([r[b] - r[a] for r in rows], (50, 90, 99))
        print(json.dumps({"hop": label, **summary}), file=sys.stderr)
        cells = " | ".join(f"{summary[f'p{p}_ms'] * scale:.{digits}f}" for p in (50, 90, 99))
        print(f"| {label} | {cells} |")

if __name__ == "__main__":
    main()

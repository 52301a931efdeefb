"""leasequeue's own measurements; runs in the dev venv (leasequeue installed).

  lq_bench.py claim  --url U --sizes 1000,100000 --samples 3000 --reps 3
      claim latency of one script call (1 job and a batch of 50) with the
      ready set held at each size
  lq_bench.py bench  --url U [--sections enqueue,drain,e2s,bare,memory]
      one repetition of the throughput / latency sections
  lq_bench.py worker --url U --concurrency C
      a worker process (started by `bench`)

Output: JSON lines (common.emit).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Sequence
from typing import Any

import anyio
import redis as redis_sync

import leasequeue
from leasequeue import App, JobRequest, SyncApp, Worker
from leasequeue.loops import LOOPS, backend_options, has_uvloop
from leasequeue.models import ClaimedJob
from leasequeue.store.keys import QueueKeys, queue_keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
import concurrent_floor

PREFIX = "bench"
QUEUE = "default"
LEASE_MS = 30_000
FILL_CHUNK = 10_000  # jobs per enqueue_many call when filling (it splits by 500 itself)
_stamp_client: redis_sync.Redis | None = None


def _app(url: str) -> App:
    """The App with the two bench jobs: `noop` and the latency probe `probe`."""
    app = App(url, prefix=PREFIX)

    async def noop(ctx: leasequeue.Context) -> None:
        return None

    async def probe(ctx: leasequeue.Context) -> None:
        # the start time first; the push (same for every peer) comes after it
        global _stamp_client
        now = time.time_ns()
        if _stamp_client is None:
            _stamp_client = redis_sync.Redis.from_url(app.url)
        _stamp_client.rpush(common.STAMPS, now)

    app.job(noop)
    app.job(probe)
    return app


async def ack_all(app: App, qk: QueueKeys, jobs: Sequence[ClaimedJob],
                  retention_ms: int) -> None:
    """Ack claimed jobs as succeeded, in one script call."""
    await app.scripts.ack(qk, "succeeded", retention_ms,
                          [(j.id, j.token, b"", "") for j in jobs])


async def fill(app: App, count: int) -> float:
    """Enqueue `count` no-op jobs in big enqueue_many calls; returns seconds."""
    started = time.perf_counter()
    left = count
    while left > 0:
        k = min(FILL_CHUNK, left)
        await app.enqueue_many([JobRequest("noop") for _ in range(k)])
        left -= k
    return time.perf_counter() - started


# -- claim latency ------------------------------------------------------------

async def claim_latency(args: argparse.Namespace) -> None:
    """For each size: fill the ready set up to it, then time single claim
    calls. After each timed claim (untimed) the jobs are acked, as a worker
    would, and as many new jobs enqueued, so the set stays at its size and
    every claim pops an old, cold entry, not one just put back."""
    app = _app(args.url)
    qk = app.keys(QUEUE)
    held = 0
    for size in [int(s) for s in args.sizes.split(",")]:
        fill_s = await fill(app, size - held)
        held = size
        common.emit("lq_fill", size=size, seconds=round(fill_s, 2),
                    value=round(size / max(fill_s, 1e-9)))
        for rep in range(args.reps):
            for count in (1, 50):
                samples: list[int] = []
                for _ in range(args.samples):
                    t0 = time.perf_counter_ns()
                    batch = await app.scripts.claim(qk, count, LEASE_MS, "bench-claimer",
                                                    count, uuid.uuid4().hex)
                    samples.append(time.perf_counter_ns() - t0)
                    if len(batch.jobs) != count:
                        raise RuntimeError(f"claimed {len(batch.jobs)} of {count}")
                    # untimed, and side by side: ack these, put as many new in
                    await asyncio.gather(
                        ack_all(app, qk, batch.jobs, 0),
                        app.enqueue_many([JobRequest("noop") for _ in range(count)]))
                common.emit("lq_claim", size=size, batch=count, rep=rep,
                            **common.latency_summary(samples, (50, 99, 99.9)))
    await app.close()


# -- one repetition of the rest ------------------------------------------------

async def one_per_call(app: App, args: argparse.Namespace) -> dict[str, Any]:
    """One awaited app.enqueue at a time, up to --one-n calls or --one-budget s."""
    n, started = 0, time.perf_counter()
    deadline = started + args.one_budget
    while n < args.one_n and time.perf_counter() < deadline:
        await app.enqueue("noop")
        n += 1
    return common.timed_rate(n, time.perf_counter() - started)


async def record(metric: str, measure: Awaitable[dict[str, Any]], url: str) -> None:
    """Emit ``metric`` with what ``measure`` answers, or its error under that
    name (the bench goes on); then flush the Redis at ``url``."""
    try:
        common.emit(metric, **await measure)
    except Exception as exc:
        common.emit_error(metric, exc)
    common.flush(url)


async def enqueue_rates(app: App, args: argparse.Namespace) -> None:
    await record("enqueue_one", one_per_call(app, args), args.url)
    try:
        # the same, from the sync producer (WSGI code, scripts): it blocks this
        # loop while it runs, and nothing else runs meanwhile
        with SyncApp.from_app(app) as sync:
            sync.enqueue("noop")  # its connection and queue check, untimed
            common.flush(args.url)
            n, started = 0, time.perf_counter()
            deadline = started + args.one_budget
            while n < args.one_n and time.perf_counter() < deadline:
                sync.enqueue("noop")
                n += 1
            common.emit("enqueue_one_sync",
                        **common.timed_rate(n, time.perf_counter() - started))
    except Exception as exc:
        common.emit_error("enqueue_one_sync", exc)
    common.flush(args.url)
    # 100 tasks each awaiting app.enqueue in a loop (a web service's shape)
    await record("enqueue_concurrent", common.concurrent_enqueue(
        lambda: app.enqueue("noop"), args.conc_n, args.conc_budget), args.url)
    await loop_floor("", args)
    if has_uvloop():
        # the same two from a service whose loop is uvloop's (uvicorn's default
        # when installed): a loop of its own in a thread, while this one waits
        await anyio.to_thread.run_sync(lambda: uvloop_rates(args))
    try:
        # the requests are built inside the timer, as every peer's are
        started = time.perf_counter()
        await app.enqueue_many([JobRequest("noop") for _ in range(args.n)])
        common.emit("enqueue_bulk", **common.timed_rate(args.n, time.perf_counter() - started))
    except Exception as exc:
        common.emit_error("enqueue_bulk", exc)
    common.flush(args.url)


async def loop_floor(suffix: str, args: argparse.Namespace) -> None:
    """The event loop's own floor under the 100-task column, right after it,
    in this process and on this loop and Redis (concurrent_floor.py): as
    many calls from 100 tasks alike, each parking a future that one
    coalescer task resolves a batch at a time, first after one empty script
    call a batch (``concurrent_floor`` + ``suffix``: a mark), then with no
    I/O at all (``concurrent_floor_bare`` + ``suffix``: park and wake
    alone, a bound). Each is emitted under its name, an error too (the bench
    goes on); the report sets the column and issue 11's 3x against them."""
    await record("concurrent_floor" + suffix,
                 concurrent_floor.floor(args.conc_n, args.url, args.conc_budget), args.url)
    await record("concurrent_floor_bare" + suffix,
                 concurrent_floor.floor(args.conc_n, None, args.conc_budget), args.url)


def uvloop_rates(args: argparse.Namespace) -> None:
    """enqueue_one and enqueue_concurrent from an App on uvloop's event loop
    (emitted as enqueue_one_uvloop and enqueue_concurrent_uvloop)."""
    import uvloop

    async def rates() -> None:
        app = _app(args.url)
        try:
            await app.enqueue("noop")  # its connection and queue check, untimed
            common.flush(args.url)
            await record("enqueue_one_uvloop", one_per_call(app, args), args.url)
            await record("enqueue_concurrent_uvloop", common.concurrent_enqueue(
                lambda: app.enqueue("noop"), args.conc_n, args.conc_budget), args.url)
            await loop_floor("_uvloop", args)
        finally:
            await app.close()

    try:
        uvloop.run(rates())
    except Exception as exc:
        common.emit_error("enqueue_one_uvloop", exc)
    common.flush(args.url)


async def memory_per_job(app: App, args: argparse.Namespace) -> None:
    """used_memory bytes per queued no-op job: INFO memory before and after
    queuing --mem-n jobs (enqueue_many), on a flushed Redis."""
    try:
        common.flush(args.url)
        before = common.used_memory(args.url)
        await fill(app, args.mem_n)
        common.emit("memory_per_job", **common.memory_line(before,
                                                           common.used_memory(args.url),
                                                           args.mem_n))
    except Exception as exc:
        common.emit_error("memory_per_job", exc)
    common.flush(args.url)


def left_counter(url: str) -> tuple[redis_sync.Redis, Any]:
    """Jobs not finished: queued (the ready set and the line) + leased (an
    acked job leaves the lease set)."""
    client = redis_sync.Redis.from_url(url)
    keys = queue_keys(PREFIX, QUEUE)

    def left() -> int:
        with client.pipeline(transaction=False) as pipe:
            pipe.zcard(keys.ready)
            pipe.llen(keys.line)
            pipe.zcard(keys.leases)
            ready, line, leased = pipe.execute()
        return int(ready) + int(line) + int(leased)

    return client, left


async def drain(app: App, args: argparse.Namespace, concurrency: int, procs: int,
                label: str) -> None:
    try:
        await fill(app, args.n)
        client, left = left_counter(args.url)
        workers = [common.spawn(worker_argv(args, concurrency), f"lq-{label}-{i}")
                   for i in range(procs)]
        try:
            sample = common.cpu_sampler(args.url, lambda: [w.pid for w in workers])
            result = await anyio.to_thread.run_sync(
                lambda: common.measure_drain(
                    left, args.n, args.drain_budget,
                    alive=lambda: all(w.poll() is None for w in workers), sample=sample))
        finally:
            for w in workers:
                common.stop(w)
            client.close()
        common.emit(label, concurrency=concurrency, procs=procs, **result)
    except Exception as exc:
        common.emit_error(label, exc)
    common.flush(args.url)


def worker_argv(args: argparse.Namespace, concurrency: int) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "worker", "--url", args.url,
            "--concurrency", str(concurrency), "--loop", args.loop]


async def e2s(app: App, args: argparse.Namespace) -> None:
    """Enqueue-to-start on an idle worker at its default concurrency (10)."""
    try:
        worker = common.spawn(worker_argv(args, 10), "lq-e2s")
        try:
            # a warm-up probe proves the worker is up and idle before timing
            await common.measure_e2s_async(lambda: app.enqueue("probe"), args.url, 1, 30.0)
            result = await common.measure_e2s_async(lambda: app.enqueue("probe"), args.url,
                                                    args.e2s_n, args.e2s_budget, args.e2s_min)
        finally:
            common.stop(worker)
        common.emit("e2s", **result)
    except Exception as exc:
        common.emit_error("e2s", exc)
    common.flush(args.url)


async def bare_loop(app: App, args: argparse.Namespace, count: int) -> None:
    """Claim `count`, ack them, repeat, from one client with no worker around
    it: what the two scripts cost per job, the floor for the drain figures."""
    label = f"bare_claim_ack_{count}"
    try:
        await fill(app, args.n)
        qk = app.keys(QUEUE)
        done, started = 0, time.perf_counter()
        # the rate settles within seconds; a budget keeps the 1-by-1 loop short
        deadline = started + min(args.drain_budget, 3.0)
        while done < args.n and time.perf_counter() < deadline:
            batch = await app.scripts.claim(qk, count, LEASE_MS, "bench-bare", count,
                                            uuid.uuid4().hex)
            await ack_all(app, qk, batch.jobs, 86_400_000)
            done += len(batch.jobs)
        common.emit(label, batch=count, **common.timed_rate(done, time.perf_counter() - started))
    except Exception as exc:
        common.emit_error(label, exc)
    common.flush(args.url)


async def bench(args: argparse.Namespace) -> None:
    common.check_url(args.url)
    common.flush(args.url)
    sections = set(args.sections.split(","))
    app = _app(args.url)
    loop = "uvloop" if backend_options(args.loop) else "asyncio"
    common.emit("info", version=leasequeue.__version__,
                config=f"1 process, async no-op handler, lease 30 s, defaults otherwise "
                f"(the worker command's --loop {args.loop}: {loop}); producer on asyncio's "
                "loop, and on uvloop's in the uvloop rows")
    if "enqueue" in sections:
        await enqueue_rates(app, args)
    if "drain" in sections:
        for c in args.concurrency:
            await drain(app, args, c, 1, f"drain_c{c}")
        await drain(app, args, max(args.concurrency), 2, "drain_2proc")
    if "e2s" in sections:
        await e2s(app, args)
    if "bare" in sections:
        await bare_loop(app, args, 1)
        await bare_loop(app, args, 100)
    if "memory" in sections:
        await memory_per_job(app, args)
    await app.close()


async def worker(args: argparse.Namespace) -> None:
    app = _app(args.url)
    w = Worker(app, queues=[QUEUE], concurrency=args.concurrency[0],
               handle_signals=True)
    await w.run()
    await app.close()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["claim", "bench", "worker"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--one-n", type=int, default=5_000)
    ap.add_argument("--one-budget", type=float, default=3.0)
    ap.add_argument("--e2s-n", type=int, default=300)
    ap.add_argument("--e2s-budget", type=float, default=8.0)
    ap.add_argument("--e2s-min", type=int, default=1)
    ap.add_argument("--drain-budget", type=float, default=60.0)
    ap.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 10, 100])
    ap.add_argument("--conc-n", type=int, default=20_000)
    ap.add_argument("--conc-budget", type=float, default=3.0)
    ap.add_argument("--mem-n", type=int, default=100_000)
    ap.add_argument("--sections", default="enqueue,drain,e2s,bare,memory")
    ap.add_argument("--loop", choices=LOOPS, default="auto",
                    help="the workers' event loop, as `leasequeue worker --loop`")
    args = ap.parse_args(argv)
    if args.role == "worker":
        # the event loop the worker command would pick (leasequeue/loops.py)
        anyio.run(worker, args, backend_options=backend_options(args.loop))
        return
    common.check_url(args.url)
    anyio.run(claim_latency if args.role == "claim" else bench, args)


if __name__ == "__main__":
    main()

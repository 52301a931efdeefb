"""The measurement sequence every Python peer goes through, so they differ
only in how they talk to their own queue (the Peer they hand in).

One repetition, in one process:
  1. enqueue one job per call, up to --one-n jobs or --one-budget seconds;
  2. bulk-enqueue --n jobs where the peer has a bulk API (timed), otherwise
     put them in untimed with the fastest single-job path (`fill`);
  3. start the peer's worker process(es) and time the drain of those jobs;
  4. with the now idle worker, time enqueue-to-start of one probe at a time.
Each step reports its own line, or its own error line, and the next still runs.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from collections.abc import Sequence
from typing import Protocol

import common


class Peer(Protocol):
    name: str
    version: str
    config: str
    bulk_api: str | None  # the bulk call's name, None when the peer has none
    concurrency: int  # jobs run at once, all worker processes together (for the plot)

    async def connect(self, url: str) -> None: ...
    async def enqueue_one(self) -> None: ...
    async def enqueue_bulk(self, n: int) -> None: ...
    async def fill(self, n: int) -> None: ...
    async def left(self) -> int: ...
    async def send_probe(self) -> None: ...
    async def after_flush(self) -> None: ...  # re-create what a flush deleted, if needed
    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]: ...
    async def close(self) -> None: ...


async def run_bench(peer: Peer, args: argparse.Namespace) -> None:
    common.check_url(args.url)
    common.flush(args.url)
    await peer.connect(args.url)
    sections = set(args.sections.split(","))
    common.emit("info", version=peer.version, config=peer.config, bulk_api=peer.bulk_api,
                concurrency=peer.concurrency)
    try:
        if "enqueue" in sections:
            await _enqueue_one(peer, args)
            common.flush(args.url)
            await peer.after_flush()
        await _bulk(peer, args)
        if "drain" in sections or "e2s" in sections:
            await _drain_and_e2s(peer, args, sections)
    finally:
        await peer.close()
        common.flush(args.url)


async def _enqueue_one(peer: Peer, args: argparse.Namespace) -> None:
    try:
        n, started = 0, time.perf_counter()
        deadline = started + args.one_budget
        while n < args.one_n and time.perf_counter() < deadline:
            await peer.enqueue_one()
            n += 1
        common.emit("enqueue_one", **common.timed_rate(n, time.perf_counter() - started))
    except Exception as exc:
        common.emit_error("enqueue_one", exc)


async def _bulk(peer: Peer, args: argparse.Namespace) -> None:
    """Timed bulk enqueue when there is a bulk API; these jobs are then drained."""
    if peer.bulk_api is None:
        common.emit("enqueue_bulk", value=None, note="no bulk enqueue API")
        started = time.perf_counter()
        await peer.fill(args.n)
        common.emit("fill", **common.timed_rate(args.n, time.perf_counter() - started))
        return
    try:
        started = time.perf_counter()
        await peer.enqueue_bulk(args.n)
        common.emit("enqueue_bulk", api=peer.bulk_api,
                    **common.timed_rate(args.n, time.perf_counter() - started))
    except Exception as exc:
        common.emit_error("enqueue_bulk", exc)
        common.flush(args.url)
        await peer.after_flush()
        await peer.fill(args.n)


async def _drain_and_e2s(peer: Peer, args: argparse.Namespace, sections: set[str]) -> None:
    workers = _start_workers(peer, args)
    try:
        drained = True
        if "drain" in sections:
            try:
                sample = common.cpu_sampler(args.url, lambda: common.worker_tree(workers))
                result = await common.measure_drain_async(peer.left, args.n, args.drain_budget,
                                                          sample)
                common.emit("drain", **result)
                drained = bool(result["complete"])
            except Exception as exc:
                common.emit_error("drain", exc)
                drained = False
        if "e2s" not in sections:
            return
        if not drained:
            # the backlog of a drain cut by its budget would be timed, not an
            # idle worker: stop the workers, empty Redis, start fresh ones
            await _stop_workers(workers)
            common.flush(args.url)
            await peer.after_flush()
            workers = _start_workers(peer, args)
        try:
            # a warm-up probe proves the worker is up and idle before timing
            await common.measure_e2s_async(peer.send_probe, args.url, 1, 30.0)
            result = await common.measure_e2s_async(peer.send_probe, args.url, args.e2s_n,
                                                    args.e2s_budget, args.e2s_min)
            common.emit("e2s", **result)
        except Exception as exc:
            common.emit_error("e2s", exc)
    finally:
        await _stop_workers(workers)


def _start_workers(peer: Peer, args: argparse.Namespace) -> list[subprocess.Popen[bytes]]:
    return [common.spawn(argv, f"{peer.name}-worker-{i}")
            for i, argv in enumerate(peer.worker_argvs(args))]


async def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        await asyncio.to_thread(common.stop, w)


def main(peer: Peer, argv: Sequence[str] | None = None) -> None:
    args = common.bench_args(argv)
    asyncio.run(run_bench(peer, args))

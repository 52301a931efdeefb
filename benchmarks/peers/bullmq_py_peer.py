"""BullMQ's Python port: the same Lua scripts and key layout as BullMQ on
Node, asyncio workers."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from importlib.metadata import version
from typing import Any

import common
from bullmq import Queue, Worker

from peers import driver, sync_jobs

CONCURRENCY = 100
QUEUE = "bench"


async def process(job: Any, token: str) -> None:
    if job.name == "probe":
        sync_jobs.probe()


class BullmqPyPeer:
    name = "bullmq-py"
    version = version("bullmq")
    config = (f"1 worker process, concurrency={CONCURRENCY} (default 1), completed jobs kept "
              "(default)")
    concurrency = CONCURRENCY  # jobs one worker process runs at once
    bulk_api = "Queue.addBulk"

    def __init__(self) -> None:
        self.queue: Queue | None = None

    async def connect(self, url: str) -> None:
        self.queue = Queue(QUEUE, {"connection": url})

    async def enqueue_one(self) -> None:
        assert self.queue is not None
        await self.queue.add("noop", {})

    async def enqueue_bulk(self, n: int) -> None:
        assert self.queue is not None
        for start in range(0, n, 1000):
            await self.queue.addBulk([{"name": "noop", "data": {}}
                                      for _ in range(min(1000, n - start))])

    async def fill(self, n: int) -> None:
        await self.enqueue_bulk(n)

    async def left(self) -> int:
        assert self.queue is not None
        return int(await self.queue.getJobCountByTypes("waiting", "active"))

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        assert self.queue is not None
        await self.queue.add("probe", {})

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "peers.bullmq_py_peer", "worker", "--url", args.url]]

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()


async def worker(url: str) -> None:
    import os

    os.environ["BENCH_URL"] = url
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    w = Worker(QUEUE, process, {"connection": url, "concurrency": CONCURRENCY})
    await stop.wait()
    await w.close()


if __name__ == "__main__":
    a = common.bench_args()
    if a.role == "worker":
        asyncio.run(worker(a.url))
    else:
        driver.main(BullmqPyPeer())

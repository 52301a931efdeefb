"""SAQ: asyncio, Redis lists plus a job hash; workers block on BLMOVE."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from importlib.metadata import version
from typing import Any

import common
import redis
from saq import Queue, Worker

from peers import driver

CONCURRENCY = 100
_stamp_client: redis.Redis | None = None


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def probe(ctx: dict[str, Any]) -> None:
    global _stamp_client
    if _stamp_client is None:
        _stamp_client = redis.Redis.from_url(os.environ["BENCH_URL"])
    common.stamp_now(_stamp_client)


class SaqPeer:
    name = "saq"
    version = version("saq")
    config = f"1 worker process, concurrency={CONCURRENCY} (default 10), Redis queue"
    concurrency = CONCURRENCY  # jobs one worker process runs at once
    bulk_api = None  # Queue.map enqueues many but waits for their results

    def __init__(self) -> None:
        self.queue: Any = None

    async def connect(self, url: str) -> None:
        self.queue = Queue.from_url(url)
        await self.queue.connect()

    async def enqueue_one(self) -> None:
        await self.queue.enqueue("noop")

    async def enqueue_bulk(self, n: int) -> None:
        raise NotImplementedError

    async def fill(self, n: int) -> None:
        for start in range(0, n, 500):
            await asyncio.gather(*(self.queue.enqueue("noop")
                                   for _ in range(min(500, n - start))))

    async def left(self) -> int:
        return int(await self.queue.count("incomplete"))

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        await self.queue.enqueue("probe")

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "peers.saq_peer", "worker", "--url", args.url]]

    async def close(self) -> None:
        await self.queue.disconnect()


async def worker(url: str) -> None:
    os.environ["BENCH_URL"] = url
    queue = Queue.from_url(url)
    await Worker(queue, functions=[noop, probe], concurrency=CONCURRENCY).start()


if __name__ == "__main__":
    a = common.bench_args()
    if a.role == "worker":
        asyncio.run(worker(a.url))
    else:
        driver.main(SaqPeer())

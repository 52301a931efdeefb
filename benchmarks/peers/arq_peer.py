"""arq: asyncio, one Redis sorted set as the queue, workers poll it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from importlib.metadata import version
from typing import Any

import common
import redis
from arq import Worker, create_pool
from arq.connections import ArqRedis, RedisSettings

from peers import driver

MAX_JOBS = 100
_stamp_client: redis.Redis | None = None


async def noop(ctx: dict[str, Any]) -> None:
    return None


async def probe(ctx: dict[str, Any]) -> None:
    global _stamp_client
    if _stamp_client is None:
        _stamp_client = redis.Redis.from_url(os.environ["BENCH_URL"])
    common.stamp_now(_stamp_client)


class ArqPeer:
    name = "arq"
    version = version("arq")
    config = (f"1 worker process, max_jobs={MAX_JOBS} (default 10), poll_delay 0.5 s "
              "(default), results kept 1 h (default)")
    concurrency = MAX_JOBS  # jobs one worker process runs at once
    bulk_api = None

    def __init__(self) -> None:
        self.pool: ArqRedis | None = None

    async def connect(self, url: str) -> None:
        self.pool = await create_pool(RedisSettings.from_dsn(url))

    async def enqueue_one(self) -> None:
        assert self.pool is not None
        await self.pool.enqueue_job("noop")

    async def enqueue_bulk(self, n: int) -> None:
        raise NotImplementedError

    async def fill(self, n: int) -> None:
        # no bulk call: 500 enqueue_job calls in flight at a time
        assert self.pool is not None
        for start in range(0, n, 500):
            await asyncio.gather(*(self.pool.enqueue_job("noop")
                                   for _ in range(min(500, n - start))))

    async def left(self) -> int:
        assert self.pool is not None
        # a job stays in arq:queue until it has finished
        return int(await self.pool.zcard("arq:queue"))

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        assert self.pool is not None
        await self.pool.enqueue_job("probe")

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "peers.arq_peer", "worker", "--url", args.url]]

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.aclose()


def worker(url: str) -> None:
    os.environ["BENCH_URL"] = url
    Worker(functions=[noop, probe], redis_settings=RedisSettings.from_dsn(url),
           max_jobs=MAX_JOBS, handle_signals=True).run()


if __name__ == "__main__":
    a = common.bench_args()
    if a.role == "worker":
        worker(a.url)
    else:
        driver.main(ArqPeer())

"""taskiq with taskiq-redis' RedisStreamBroker (the one its README
recommends: a Redis stream with a consumer group and acks), `taskiq worker`
CLI defaults (2 processes, 100 async tasks each)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from importlib.metadata import version

import common
import redis.asyncio as aredis
from taskiq_redis import RedisStreamBroker

from peers import driver, sync_jobs


def _url() -> str:
    url = os.environ.get("BENCH_URL")
    if url is None:
        url = common.bench_args().url
        os.environ["BENCH_URL"] = url
    return url


broker = RedisStreamBroker(url=_url())


# explicit names: the default is "<module>:<function>", and the bench process
# runs this module as __main__ while the worker imports it as peers.taskiq_peer
@broker.task(task_name="noop")
async def noop() -> None:
    return None


@broker.task(task_name="probe")
async def probe() -> None:
    sync_jobs.probe()


class TaskiqPeer:
    name = "taskiq"
    version = f"{version('taskiq')} (taskiq-redis {version('taskiq-redis')})"
    config = ("RedisStreamBroker (stream + consumer group + ack), `taskiq worker` defaults: "
              "2 processes x max 100 async tasks")
    concurrency = 2 * 100  # jobs run at once, all worker processes together
    bulk_api = None

    def __init__(self) -> None:
        self.client: aredis.Redis | None = None

    async def connect(self, url: str) -> None:
        self.client = aredis.Redis.from_url(url)
        await broker.startup()

    async def enqueue_one(self) -> None:
        await noop.kiq()

    async def enqueue_bulk(self, n: int) -> None:
        raise NotImplementedError

    async def after_flush(self) -> None:
        # a flush deletes the consumer group; a group declared later (by a
        # worker's start-up) starts at "$" and would skip every job put in
        # before it, so declare it again first
        await broker._declare_consumer_group()

    async def fill(self, n: int) -> None:
        for start in range(0, n, 500):
            await asyncio.gather(*(noop.kiq() for _ in range(min(500, n - start))))

    async def left(self) -> int:
        # entries not yet delivered to the group (lag) + delivered, not acked
        assert self.client is not None
        groups = await self.client.xinfo_groups(broker.queue_name)
        if not groups:
            return int(await self.client.xlen(broker.queue_name))
        g = groups[0]
        return int(g.get("lag") or 0) + int(g.get("pending") or 0)

    async def send_probe(self) -> None:
        await probe.kiq()

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "taskiq", "worker", "peers.taskiq_peer:broker"]]

    async def close(self) -> None:
        await broker.shutdown()
        if self.client is not None:
            await self.client.aclose()


if __name__ == "__main__":
    driver.main(TaskiqPeer())

"""RQ with SimpleWorker: one process runs one job at a time (no fork per
job, unlike RQ's default Worker). RQ is synchronous; the driver's async
calls just block, which is all a one-at-a-time producer needs."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

import common
import redis
from rq import Queue, SimpleWorker

from peers import driver
from peers.sync_jobs import noop, probe


class RqPeer:
    name = "rq"
    version = version("rq")
    config = "1 SimpleWorker process (one job at a time, no fork), results kept 500 s (default)"
    concurrency = 1  # jobs run at once, all worker processes together
    bulk_api = "Queue.enqueue_many"

    def __init__(self) -> None:
        self.client: redis.Redis | None = None
        self.queue: Queue | None = None

    async def connect(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.queue = Queue("default", connection=self.client)

    async def enqueue_one(self) -> None:
        assert self.queue is not None
        self.queue.enqueue(noop)

    async def enqueue_bulk(self, n: int) -> None:
        assert self.queue is not None
        # enqueue_many writes its jobs in one pipeline; chunks keep it bounded
        for start in range(0, n, 1000):
            self.queue.enqueue_many([Queue.prepare_data(noop)
                                     for _ in range(min(1000, n - start))])

    async def fill(self, n: int) -> None:
        await self.enqueue_bulk(n)

    async def left(self) -> int:
        assert self.client is not None and self.queue is not None
        with self.client.pipeline(transaction=False) as pipe:
            pipe.llen(self.queue.key)
            pipe.zcard(self.queue.started_job_registry.key)
            queued, started = pipe.execute()
        return int(queued) + int(started)

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        assert self.queue is not None
        self.queue.enqueue(probe)

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "peers.rq_peer", "worker", "--url", args.url]]

    async def close(self) -> None:
        if self.client is not None:
            self.client.close()


def worker(url: str) -> None:
    os.environ["BENCH_URL"] = url
    client = redis.Redis.from_url(url)
    SimpleWorker([Queue("default", connection=client)], connection=client).work(
        logging_level="WARNING")


if __name__ == "__main__":
    a = common.bench_args()
    if a.role == "worker":
        worker(a.url)
    else:
        driver.main(RqPeer())

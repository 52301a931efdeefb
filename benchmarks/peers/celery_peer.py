"""Celery with the Redis broker: `celery worker` defaults (prefork pool,
one child per CPU, prefetch multiplier 4), no result backend."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

import common
import redis
from celery import Celery

from peers import driver, sync_jobs


def _url() -> str:
    url = os.environ.get("BENCH_URL")
    if url is None:
        url = common.bench_args().url
        os.environ["BENCH_URL"] = url
    return url


app = Celery("bench", broker=_url())


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="probe")
def probe() -> None:
    sync_jobs.probe()


class CeleryPeer:
    name = "celery"
    version = version("celery")
    config = (f"`celery worker` defaults: prefork pool, concurrency={os.cpu_count()} (= CPUs), "
              "prefetch multiplier 4, no result backend")
    concurrency = os.cpu_count() or 1  # jobs run at once, all worker processes together
    bulk_api = None  # a group() publishes its messages one by one

    def __init__(self) -> None:
        self.client: redis.Redis | None = None

    async def connect(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    async def enqueue_one(self) -> None:
        noop.delay()

    async def enqueue_bulk(self, n: int) -> None:
        raise NotImplementedError

    async def fill(self, n: int) -> None:
        # one producer for the lot, as group() does: ~35% faster than delay()
        with app.producer_or_acquire() as producer:
            for _ in range(n):
                noop.apply_async(producer=producer)

    async def left(self) -> int:
        # queued messages, plus those a worker has fetched but not acked
        assert self.client is not None
        with self.client.pipeline(transaction=False) as pipe:
            pipe.llen("celery")
            pipe.hlen("unacked")
            queued, unacked = pipe.execute()
        return int(queued) + int(unacked)

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        probe.delay()

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "celery", "-A", "peers.celery_peer", "worker",
                 "--loglevel=WARNING"]]

    async def close(self) -> None:
        if self.client is not None:
            self.client.close()


if __name__ == "__main__":
    driver.main(CeleryPeer())

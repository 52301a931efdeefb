"""Dramatiq with its Redis broker: the `dramatiq` CLI worker, defaults
(one process per CPU, 8 worker threads each)."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

import common
import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from peers import driver, sync_jobs


def _url() -> str:
    # the broker must exist before the actors are declared, at import time:
    # the bench process gets the URL from argv, the CLI worker from the env
    url = os.environ.get("BENCH_URL")
    if url is None:
        url = common.bench_args().url
        os.environ["BENCH_URL"] = url
    return url


broker = RedisBroker(url=_url())
dramatiq.set_broker(broker)


@dramatiq.actor
def noop() -> None:
    return None


@dramatiq.actor
def probe() -> None:
    sync_jobs.probe()


class DramatiqPeer:
    name = "dramatiq"
    version = version("dramatiq")
    config = (f"`dramatiq` CLI defaults: {os.cpu_count()} processes (one per CPU) x 8 threads, "
              "default middleware")
    concurrency = (os.cpu_count() or 1) * 8  # jobs run at once, all worker processes together
    bulk_api = None

    def __init__(self) -> None:
        self.client: redis.Redis | None = None

    async def connect(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)

    async def enqueue_one(self) -> None:
        noop.send()

    async def enqueue_bulk(self, n: int) -> None:
        raise NotImplementedError

    async def fill(self, n: int) -> None:
        for _ in range(n):
            noop.send()

    async def left(self) -> int:
        # a message body stays in <ns>:<queue>.msgs until it is acked
        assert self.client is not None
        return int(self.client.hlen("dramatiq:default.msgs"))

    async def after_flush(self) -> None:
        return None

    async def send_probe(self) -> None:
        probe.send()

    def worker_argvs(self, args: argparse.Namespace) -> list[list[str]]:
        return [[sys.executable, "-m", "dramatiq", "peers.dramatiq_peer"]]

    async def close(self) -> None:
        if self.client is not None:
            self.client.close()


if __name__ == "__main__":
    driver.main(DramatiqPeer())

"""Plain job functions for the peers that import jobs by dotted path (RQ):
they must live in a module that is not __main__."""

from __future__ import annotations

import os

import common
import redis

_stamp_client: redis.Redis | None = None


def noop() -> None:
    return None


def probe() -> None:
    """The latency probe: push our start time (see common.measure_e2s)."""
    global _stamp_client
    if _stamp_client is None:
        _stamp_client = redis.Redis.from_url(os.environ["BENCH_URL"])
    common.stamp_now(_stamp_client)

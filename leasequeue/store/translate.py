"""The one place where redis-py's errors become leasequeue's: connection and
timeout errors (and a cluster that is re-forming) become RedisUnavailable
naming the URL; an error reply becomes ScriptError naming the operation.
Every component that talks to Redis goes through here."""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisClusterException,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import RedisUnavailable, ScriptError

T = TypeVar("T")

# the slot moved or the cluster is re-forming (a failover): retry later
TOPOLOGY_ERRORS = (MovedError, AskError, ClusterDownError, TryAgainError, SlotNotCoveredError)
# every error meaning "Redis cannot be reached right now" (OSError: a socket
# error redis-py did not wrap, e.g. while connecting)
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, *TOPOLOGY_ERRORS, RedisClusterException,
               ClusterError, OSError)


@contextmanager
def redis_errors(url: str, operation: str) -> Iterator[None]:
    """Run a block of Redis calls; its failures come out as leasequeue errors."""
    try:
        yield
    except RedisUnavailable:
        raise
    except UNAVAILABLE as exc:
        raise RedisUnavailable(url, exc) from exc
    except ResponseError as exc:
        raise ScriptError(operation, str(exc)) from exc


async def translate_errors(url: str, operation: str, call: Awaitable[T]) -> T:
    """Await one call under redis_errors()."""
    with redis_errors(url, operation):
        return await call


def unavailable(exc: BaseException) -> bool:
    """True for an error that means Redis cannot be reached right now."""
    return isinstance(exc, UNAVAILABLE)


__all__ = ["TOPOLOGY_ERRORS", "UNAVAILABLE", "redis_errors", "translate_errors", "unavailable"]


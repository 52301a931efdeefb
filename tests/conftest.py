"""Fixtures: a real redis-server started on a free port for the session, and
an App per test on it or on the embedded memory:// store."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis as redis_sync

from leasequeue import App
from tests.harness.redis_proc import RedisProcess
from tests.harness.tcp_proxy import TcpProxy

pytest_plugins = ["tests.conftest_cluster"]

_counter = itertools.count()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    with RedisProcess() as server:
        yield server


@pytest.fixture
def debug_server() -> Iterator[RedisProcess]:
    """A redis-server of its own that accepts DEBUG (Redis 7 refuses it by
    default): DEBUG SLEEP stalls it (stall_in_background)."""
    with RedisProcess(extra=["--enable-debug-command", "yes"]) as server:
        yield server


@pytest.fixture
def anyio_backend() -> str | tuple[str, dict[str, bool]]:
    # redis-py's async client is asyncio-only; LEASEQUEUE_TEST_LOOP=uvloop runs
    # the async tests on uvloop's asyncio loop instead (the loop the worker
    # command picks when uvloop is installed: leasequeue/loops.py)
    if os.environ.get("LEASEQUEUE_TEST_LOOP") == "uvloop":
        return ("asyncio", {"use_uvloop": True})
    return "asyncio"


@pytest.fixture
def prefix() -> str:
    return f"t{next(_counter)}"


@pytest.fixture(params=["redis", "memory"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def app(backend: str, redis_server: RedisProcess, prefix: str) -> AsyncIterator[App]:
    """An App on the real server or on memory://, with a fresh prefix."""
    url = redis_server.url if backend == "redis" else f"memory://{prefix}"
    a = App(url, prefix=prefix)
    yield a
    await a.close()


@pytest.fixture
async def real_app(redis_server: RedisProcess, prefix: str) -> AsyncIterator[App]:
    a = App(redis_server.url, prefix=prefix)
    yield a
    await a.close()


@pytest.fixture
def sync_redis(redis_server: RedisProcess) -> Iterator[redis_sync.Redis]:
    client = redis_sync.Redis(port=redis_server.port)
    yield client
    client.close()


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
             what: str = "condition") -> Any:
    """Poll a condition until it is truthy or the deadline passes (then fail)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Collect after every test, so that a leaked connection's ResourceWarning
    (an error here) is reported by the test that leaked it, not a later one."""
    yield
    import gc

    gc.collect()


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    """A redis-server of the test's own (a module may override it with one
    started with other options)."""
    with RedisProcess() as proc:
        yield proc


@pytest.fixture
def proxy(server: RedisProcess) -> Iterator[TcpProxy]:
    """A TCP proxy in front of ``server`` that a test can cut and restore."""
    p = TcpProxy(server.port)
    p.start()
    try:
        yield p
    finally:
        p.close()

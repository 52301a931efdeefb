"""The test harness's throwaway redis-server: a first start whose port was
taken meanwhile by a listener that never answers (a test's proxy in a
process beside) takes another port instead of waiting on it for good, and
a restart keeps the port it has (tests restart Redis under one URL)."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from tests.harness.redis_proc import RedisProcess


def test_a_first_start_on_a_taken_port_takes_another_and_a_restart_keeps_it() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        taken = silent.getsockname()[1]
        server = RedisProcess(port=taken)
        started = time.monotonic()
        server.start()
        try:
            assert server.port != taken and time.monotonic() - started < 10
            with redis.Redis(port=server.port) as client:
                assert int(client.info("server")["process_id"]) == server.proc.pid  # type: ignore[union-attr]
            moved = server.port
            server.stop()
            server.start()
            assert server.port == moved
            with redis.Redis(port=server.port) as client:
                assert client.ping()
        finally:
            server.stop()


def test_a_restart_whose_port_was_taken_raises_and_keeps_its_port() -> None:
    """A restart after stop() whose port another listener took meanwhile
    does not move (its URL is the tests'): it raises, naming the port."""
    server = RedisProcess()
    server.start()
    server.stop()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        with pytest.raises(RuntimeError, match=f"port {server.port} did not start"):
            server.start(timeout=5)
    server.stop()

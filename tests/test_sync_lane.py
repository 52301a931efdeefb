"""The sync producer's lane (store/sync_lane.py): connections whose sockets
SyncApp drives itself must never hand a stale reply to the next call, never
be shared by two threads at once, and never be used by a forked child."""

from __future__ import annotations

import socket
import struct
import threading
import time

import hiredis
import pytest
import redis as redis_sync
from redis.exceptions import TimeoutError as RedisTimeoutError

from leasequeue import SyncApp
from leasequeue.errors import RedisUnavailable
from leasequeue.store import sync_lane
from tests.harness.redis_proc import RedisProcess, stall_in_background
from tests.helpers import in_forked_child


def _idle(sync: SyncApp) -> list[object]:
    lane = sync.scripts._lane
    assert lane is not None
    return lane._idle


def test_a_sync_enqueue_writes_and_reads_on_the_socket(redis_server: RedisProcess,
                                                       prefix: str) -> None:
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        job = sync.enqueue("j", {"n": 1}, job_id="a")
        assert (job.created, job.state) == (True, "queued")
        assert not sync.enqueue("j", job_id="a").created
        (conn,) = _idle(sync)
        assert sync_lane.direct_io(conn)  # the path under test is the one taken
        assert sync.get_job("a").payload == {"n": 1}
        assert sync.stats().ready == 1


def test_a_reply_later_than_the_socket_timeout_is_never_read_by_the_next_call(
        debug_server: RedisProcess, prefix: str) -> None:
    client = redis_sync.Redis.from_url(debug_server.url, socket_timeout=0.3)
    with SyncApp(debug_server.url, prefix=prefix, redis=client) as sync:
        sync.enqueue("j", job_id="warm")
        stall = stall_in_background(debug_server, 1.5)
        try:
            threading.Event().wait(0.2)  # the sleep has begun
            started = time.monotonic()
            with pytest.raises(RedisUnavailable):
                sync.enqueue("j", job_id="late")  # two tries, each timed out
            # two waits of 0.3 s, ended by the kernel's timeouts (sync_lane.kernel_timeouts),
            # well before the stall's end at 1.3 s from here
            assert time.monotonic() - started < 1.1
        finally:
            stall.join()
        # a connection that kept "late"'s reply would answer stats() with it
        stats = sync.stats()
        assert stats.ready in (1, 2)  # "late" may have run once Redis woke
        assert sync.enqueue("j", job_id="after").created
        assert sync.stats().ready == stats.ready + 1


def _kernel_timeout(conn: object) -> tuple[float | None, float]:
    """(Python's timeout, SO_RCVTIMEO in seconds) of a lane connection's socket."""
    sock: socket.socket = conn._sock  # type: ignore[attr-defined]
    seconds, micros = struct.unpack("ll", sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                                          struct.calcsize("ll")))
    return sock.gettimeout(), seconds + micros / 1e6


def test_the_lane_s_sockets_block_with_the_timeout_in_the_kernel(redis_server: RedisProcess,
                                                                 prefix: str) -> None:
    """A connection the lane drives keeps its socket_timeout, moved from
    Python (a poll() before each send and recv) into the kernel; without a
    socket_timeout it has none in either place."""
    for timeout, expected in ((0.3, (None, 0.3)), (2.5, (None, 2.5)), (None, (None, 0.0))):
        client = redis_sync.Redis.from_url(redis_server.url, socket_timeout=timeout)
        with SyncApp(redis_server.url, prefix=prefix, redis=client) as sync:
            sync.enqueue("j")
            (conn,) = _idle(sync)
            assert _kernel_timeout(conn) == expected, timeout
            assert sync.enqueue("j").created  # and it still answers


def test_a_call_the_kernel_times_out_raises_a_timeout(debug_server: RedisProcess,
                                                      prefix: str) -> None:
    """On a socket whose timeout is the kernel's, a reply that does not come
    in time ends the read with EAGAIN: the lane raises redis-py's
    TimeoutError (what a timed-out call is), not a lost connection."""
    client = redis_sync.Redis.from_url(debug_server.url, socket_timeout=0.3)
    with SyncApp(debug_server.url, prefix=prefix, redis=client) as sync:
        sync.enqueue("j", job_id="warm")
        conn = _idle(sync).pop()  # the lane's connection, taken out of its hands
        stall = stall_in_background(debug_server, 1.0)
        try:
            threading.Event().wait(0.2)  # the sleep has begun
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                sync_lane._send_and_read(conn, hiredis.pack_command(("PING",)))
            assert time.monotonic() - started < 0.7
        finally:
            stall.join()
            conn.disconnect()  # its late reply unread


def test_threads_share_the_lane_and_each_reads_its_own_replies(redis_server: RedisProcess,
                                                               prefix: str) -> None:
    """Each thread enqueues new ids and repeats them: a reply read by the
    wrong thread would show as a wrong ``created``."""
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        sync.enqueue("j", job_id="warm")
        wrong: list[tuple[str, bool]] = []
        barrier = threading.Barrier(8)

        def work(t: int) -> None:
            barrier.wait()
            for k in range(150):
                job_id = f"t{t}-{k}"
                if not sync.enqueue("j", job_id=job_id).created:
                    wrong.append((job_id, False))
                if sync.enqueue("j", job_id=job_id).created:
                    wrong.append((job_id, True))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
        assert wrong == []
        assert sync.stats().ready == 1 + 8 * 150
        assert 1 <= len(_idle(sync)) <= 8


def test_a_forked_child_never_talks_on_its_parent_s_connection(redis_server: RedisProcess,
                                                               prefix: str) -> None:
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        sync.enqueue("j", job_id="parent-1")
        (conn,) = _idle(sync)
        parent_port = conn._sock.getsockname()[1]  # type: ignore[attr-defined]

        def child() -> str:
            job = sync.enqueue("j", job_id="child-1")
            (child_conn,) = _idle(sync)
            return f"{job.created} {child_conn._sock.getsockname()[1]}"  # type: ignore[attr-defined]

        report = in_forked_child(child)
        created, port = report.split()
        assert created == "True"
        assert int(port) != parent_port  # a connection of its own
        # the parent's connection is still in step
        assert sync.enqueue("j", job_id="parent-2").created
        assert sync.stats().ready == 3


def test_a_sentinel_connection_keeps_redis_py_s_path() -> None:
    from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

    pool = SentinelConnectionPool("mymaster", Sentinel([("127.0.0.1", 1)]))
    conn = SentinelManagedConnection(connection_pool=pool)
    assert not sync_lane.direct_io(conn)  # READONLY after a failover must reconnect
    assert not sync_lane.direct_io(redis_sync.Connection())  # not connected yet

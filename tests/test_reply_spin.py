"""A one-job enqueue's reply read off its socket (store/spin.py): a reply
that comes within the budget is read without the event loop's turn (App)
or a blocking recv (SyncApp); one that does not is left to them, and the
next calls back off; the spin stands aside while asyncio's loop has another
callback ready, and on one CPU; an EOF fails the read as the transport's
own would."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import hiredis
import pytest
import redis as redis_sync
from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from leasequeue import App, StoreSettings, SyncApp
from leasequeue.store import direct, spin, sync_lane
from tests.harness.redis_proc import RedisProcess, stall_in_background
from tests.test_coalesce import script_calls

pytestmark = pytest.mark.anyio

T = TypeVar("T")
SECOND_US = 1_000_000
STALL_BUDGET_US = 50_000  # a budget well under the tests' stall of Redis (0.3 s)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A socket pair: the first end non-blocking, as a transport's is."""
    a, b = socket.socketpair()
    a.setblocking(False)
    yield a, b
    a.close()
    b.close()


def _reader() -> hiredis.Reader:
    """A reader as redis-py makes a connection's (a reply not yet whole is
    NOT_ENOUGH_DATA)."""
    return hiredis.Reader(notEnoughData=NOT_ENOUGH_DATA)


def _now(sock: socket.socket) -> Callable[[], bytes]:
    return partial(os.read, sock.fileno(), 65536)


class Seen:
    """What the spins did: each one's outcome ("hit": it read the reply;
    "miss": its budget ran out), and on asyncio's loop the bytes the loop
    handed the lane's protocol (uvloop binds a protocol's data_received when
    it is set, so a spy cannot see them there)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.spins: list[str] = []
        self.by_loop: list[bytes] = []
        self.loop_seen = False  # whether by_loop is watched
        read = spin.ReplySpin.read

        def spied_read(self_: spin.ReplySpin, read_now: Any, reader: Any) -> Any:
            reply = read(self_, read_now, reader)
            self.spins.append("miss" if reply is NOT_ENOUGH_DATA else "hit")
            return reply

        monkeypatch.setattr(spin.ReplySpin, "read", spied_read)

    def watch_loop(self, proto: direct._LaneProtocol, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop_seen = True
        received = direct._LaneProtocol.data_received

        def spy(self_: direct._LaneProtocol, data: bytes) -> None:
            if self_ is proto:
                self.by_loop.append(data)
            received(self_, data)

        monkeypatch.setattr(direct._LaneProtocol, "data_received", spy)

    def clear(self) -> None:
        self.spins.clear()
        self.by_loop.clear()


def _spinning_app(url: str, prefix: str, budget_us: int = SECOND_US) -> App:
    """An App whose spin waits up to ``budget_us`` for a reply (whatever the
    CPUs); with the default second every spin hits, so what ends a streak is
    the loop's turn alone."""
    app = App(url, prefix=prefix, settings=StoreSettings(reply_spin_us=budget_us))
    app.job(lambda ctx: None, name="j")
    assert app.scripts._lane is not None
    app.scripts._lane._spin = spin.ReplySpin(budget_us)
    return app


async def _app_with_spin(url: str, prefix: str, budget_us: int,
                         monkeypatch: pytest.MonkeyPatch) -> tuple[App, Any, Seen]:
    """An App whose lane has one warm connection and a spin of ``budget_us``
    (whatever the CPUs), and what its reads do from then on."""
    app = _spinning_app(url, prefix, budget_us)
    await app.enqueue("j", job_id="warm")
    lane = app.scripts._lane
    assert lane is not None and len(lane._idle) == 1
    proto = lane._idle[0]._writer.transport.get_protocol()
    assert isinstance(proto, direct._LaneProtocol) and proto.read_now is not None
    seen = Seen(monkeypatch)
    if proto.ready is not None:  # asyncio's loop
        seen.watch_loop(proto, monkeypatch)
    return app, lane, seen


async def test_a_reply_within_the_budget_is_read_off_the_socket_not_by_the_loop(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app, lane, seen = await _app_with_spin(redis_server.url, prefix, SECOND_US, monkeypatch)
    try:
        for i in range(20):
            # the loop turns between two calls: each call a streak of its own
            # (a streak's bound has tests of its own, below)
            await anyio.lowlevel.checkpoint()
            job = await app.enqueue("j", {"i": i}, job_id=f"s{i}")
            assert (job.id, job.created, job.state) == (f"s{i}", True, "queued")
        assert seen.spins == ["hit"] * 20
        assert seen.by_loop == []  # no reply went through the event loop
        assert (lane._spin.misses, lane._spin.skip) == (0, 0)
        assert not (await app.enqueue("j", job_id="s3")).created  # each read its own reply
        assert (await app.stats()).ready == 21
    finally:
        await app.close()


async def test_a_reply_later_than_the_budget_is_left_to_the_loop_and_the_next_call_waits(
        debug_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 50 ms: under the stall's 200 ms left, and over a loaded host's hiccup
    # (with 2 ms the call after the stall missed once in a loaded run)
    app, lane, seen = await _app_with_spin(debug_server.url, prefix, STALL_BUDGET_US, monkeypatch)
    try:
        stall = stall_in_background(debug_server, 0.3)
        await anyio.sleep(0.1)  # the stall has begun
        started = anyio.current_time()
        with anyio.fail_after(5):
            job = await app.enqueue("j", job_id="late")
        stall.join()
        assert job.created and job.id == "late"
        assert anyio.current_time() - started < 1.0  # the stall, not more
        assert seen.spins == ["miss"]
        assert seen.by_loop != [] or not seen.loop_seen  # the loop read the reply
        assert (lane._spin.misses, lane._spin.skip) == (1, 1)
        seen.clear()
        assert (await app.enqueue("j", job_id="next")).created  # this call does not spin
        assert seen.spins == [] and lane._spin.skip == 0
        assert seen.by_loop != [] or not seen.loop_seen
        seen.clear()
        assert (await app.enqueue("j", job_id="after")).created  # this one does, and gets it
        assert seen.spins == ["hit"] and seen.by_loop == [] and lane._spin.misses == 0
    finally:
        await app.close()


async def test_no_spin_while_another_callback_is_ready_on_asyncio_s_loop(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    app, lane, seen = await _app_with_spin(redis_server.url, prefix, SECOND_US, monkeypatch)
    try:
        if not seen.loop_seen:
            pytest.skip("uvloop's ready queue cannot be read: the budget alone bounds a spin")
        proto = lane._idle[0]._writer.transport.get_protocol()
        assert proto.ready is asyncio.get_running_loop()._ready  # type: ignore[attr-defined]
        ran: list[int] = []
        asyncio.get_running_loop().call_soon(ran.append, 1)  # ready before the read
        assert (await app.enqueue("j", job_id="busy")).created
        assert ran == [1] and seen.spins == [] and seen.by_loop != []  # the loop's turn
        seen.clear()
        assert (await app.enqueue("j", job_id="idle")).created
        assert seen.spins == ["hit"] and seen.by_loop == []
    finally:
        await app.close()


LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])


def _run_on(loop: str, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """main() on a loop of its own: asyncio's, or uvloop's (whose ready
    queue cannot be read), whatever loop the suite's async tests run on."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(main())
    return asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_streak_is_one_task_s_until_the_loop_turns(
        loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spin, "perf_counter_ns", lambda: 0)  # no streak is overdue here

    async def main() -> None:
        # the tasks alone (asyncio's ready queue, which would show the other
        # task waiting at once, has a test of its own below)
        turn, running, ready = spin.LoopTurn(), asyncio.get_running_loop(), None
        seen: list[bool] = []

        async def other() -> None:
            seen.append(turn.held(running, ready))

        task = asyncio.create_task(other())  # ready before the streak's end
        assert not turn.held(running, ready)  # a new streak
        assert not turn.held(running, ready)  # the same task (its end queued is no work)
        assert not turn.overdue()
        await task  # the other task runs first, within the streak
        assert seen == [True]
        # then the loop ran the streak's end, which lets go of the task
        assert turn.handle is None and turn.task is None
        assert not turn.held(running, ready) and not turn.overdue()  # a new streak, its own

    _run_on(loop, main)


def test_a_callback_ready_on_asyncio_s_loop_is_work_waiting() -> None:
    async def main() -> None:
        turn, running = spin.LoopTurn(), asyncio.get_running_loop()
        ready = running._ready  # type: ignore[attr-defined]
        assert not turn.held(running, ready) and list(ready) == [turn.handle]
        assert not turn.held(running, ready)  # the streak's own end is no work
        running.call_soon(lambda: None)
        assert turn.held(running, ready)

    asyncio.run(main())


@pytest.mark.parametrize("loop", LOOPS)
def test_a_streak_past_its_bound_is_overdue_until_the_loop_turns(
        loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert spin.MAX_STREAK_NS == 2_000_000  # the README's 2 ms
    clock = [10**12]  # the streak's clock, moved by hand
    monkeypatch.setattr(spin, "perf_counter_ns", lambda: clock[0])

    async def main() -> None:
        turn, running = spin.LoopTurn(), asyncio.get_running_loop()
        assert not turn.held(running, None) and not turn.overdue()
        clock[0] += 2_000_000
        assert not turn.overdue()  # at its bound, not past it
        clock[0] += 1
        assert turn.overdue()
        assert not turn.held(running, None)  # overdue, not held: the call yields first
        await asyncio.sleep(0)
        assert not turn.overdue() and turn.handle is None

    _run_on(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_task_that_enqueues_in_a_loop_lets_the_loop_turn_at_each_streak_s_end(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch,
        loop: str) -> None:
    # a spun call returns without the loop's turn: 1,000 calls in a row,
    # each spin a hit, held a 0.5 ms timer for all of them (before; 25.9 ms
    # for 3,000 calls on asyncio's loop, 13.4 on uvloop's, budget 50 us). A
    # streak yields after MAX_STREAK_NS (2 ms): the timer runs about every 2
    # ms (the streak's first call: spin.LoopTurn)
    seen = Seen(monkeypatch)

    async def main() -> tuple[int, float]:
        app = _spinning_app(redis_server.url, prefix)
        ticks, stop = 0, False

        async def ticker() -> None:
            nonlocal ticks
            while not stop:
                await asyncio.sleep(0.0005)
                ticks += 1

        try:
            await app.enqueue("j", job_id="warm")
            task = asyncio.create_task(ticker())
            await asyncio.sleep(0.01)  # the ticker's first sleep has begun
            seen.clear()
            before, started = ticks, time.perf_counter()
            for i in range(1000):
                await app.enqueue("j", {"i": i})
            elapsed = time.perf_counter() - started
            during = ticks - before
            stop = True
            await task
            assert (await app.stats()).ready == 1001
            return during, elapsed
        finally:
            await app.close()

    during, elapsed = _run_on(loop, main)
    # 3 times in all, and at least once every 100 ms (50 times the bound:
    # a loaded host may hold this process between two calls of a streak)
    assert during >= max(3, int(elapsed * 10)), (during, elapsed)
    # and the spin still reads the replies (a call that finds the timer's
    # task ready after a yield parks: at most one a streak)
    assert seen.spins.count("hit") >= 500 and "miss" not in seen.spins, seen.spins


@pytest.mark.parametrize("loop", LOOPS)
def test_a_burst_of_concurrent_enqueues_batches_while_spins_hit(
        redis_server: RedisProcess, prefix: str, sync_redis: redis_sync.Redis,
        loop: str) -> None:
    # 100 tasks ready at once, each with one enqueue, on a fresh App: the
    # first call goes alone, and the other tasks park behind the next one
    # that finds the loop's other work waiting (asyncio's queue; on uvloop,
    # another task run within the first one's streak) and go in batches.
    # Before, on uvloop, each call was answered by its spin before the next
    # task ran: 101 script calls a burst with this budget
    async def main(i: int) -> int:
        app = _spinning_app(redis_server.url, f"{prefix}-burst{i}")
        try:
            before = script_calls(sync_redis)
            jobs = await asyncio.gather(*(app.enqueue("j", {"k": k}) for k in range(100)))
            assert all(job.created for job in jobs) and len({job.id for job in jobs}) == 100
            return script_calls(sync_redis) - before
        finally:
            await app.close()

    calls = [_run_on(loop, lambda i=i: main(i)) for i in range(3)]  # type: ignore[misc]
    # a queue check, the first call alone, the second, then batches
    assert max(calls) <= 10, calls


def _sync_with_spin(url: str, prefix: str, budget_us: int) -> tuple[SyncApp, Any]:
    sync = SyncApp(url, prefix=prefix, settings=StoreSettings(reply_spin_us=budget_us))
    assert sync.enqueue("j", job_id="warm").created
    lane = sync.scripts._lane
    assert lane is not None and len(lane._idle) == 1
    lane._spin = spin.ReplySpin(budget_us)
    return sync, lane


def test_a_sync_reply_within_the_budget_is_read_by_the_spin(
        redis_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sync, lane = _sync_with_spin(redis_server.url, prefix, SECOND_US)
    seen = Seen(monkeypatch)
    with sync:
        for i in range(20):
            job = sync.enqueue("j", {"i": i}, job_id=f"s{i}")
            assert (job.id, job.created) == (f"s{i}", True)
        assert seen.spins == ["hit"] * 20
        assert not sync.enqueue("j", job_id="s3").created  # each read its own reply
        assert sync.stats().ready == 21
        conn = lane._idle[0]
        assert sync_lane.read_now(conn) is sync_lane.read_now(conn)  # made once a socket


def test_a_sync_reply_later_than_the_budget_is_read_by_a_blocking_recv(
        debug_server: RedisProcess, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sync, lane = _sync_with_spin(debug_server.url, prefix, STALL_BUDGET_US)  # (as above)
    seen = Seen(monkeypatch)
    with sync:
        stall = stall_in_background(debug_server, 0.3)
        time.sleep(0.1)  # the stall has begun
        started = time.monotonic()
        job = sync.enqueue("j", job_id="late")
        stall.join()
        assert job.created and job.id == "late"
        assert time.monotonic() - started < 1.0
        assert seen.spins == ["miss"] and (lane._spin.misses, lane._spin.skip) == (1, 1)
        seen.clear()
        assert sync.enqueue("j", job_id="next").created  # this call does not spin
        assert seen.spins == [] and lane._spin.skip == 0
        assert sync.enqueue("j", job_id="after").created
        assert seen.spins == ["hit"] and lane._spin.misses == 0


def _spun_while_sent_later(spinner: spin.ReplySpin, pair: tuple[socket.socket, socket.socket],
                           data: bytes, delay: float) -> Any:
    """The spin's reply read off the pair's first end while a thread sends
    ``data`` on the other after ``delay`` seconds."""
    a, b = pair

    def later() -> None:
        time.sleep(delay)
        b.sendall(data)

    t = threading.Thread(target=later)
    t.start()
    try:
        return spinner.reply(_now(a), None, _reader())
    finally:
        t.join()


def test_the_spin_reads_a_reply_in_pieces(pair: tuple[socket.socket, socket.socket]) -> None:
    spinner = spin.ReplySpin(SECOND_US)
    pair[1].sendall(b"$5\r\nhel")
    assert _spun_while_sent_later(spinner, pair, b"lo\r\n", 0.05) == b"hello"
    assert spinner.misses == 0


def test_a_spin_that_runs_out_leaves_what_came_in_the_reader(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    spinner, reader = spin.ReplySpin(1_000), _reader()
    b.sendall(b"$5\r\nhel")
    assert spinner.reply(_now(a), None, reader) is NOT_ENOUGH_DATA
    b.sendall(b"lo\r\n")
    reader.feed(a.recv(100))
    assert reader.gets() == b"hello"


def test_misses_in_a_row_double_the_calls_that_do_not_spin_up_to_1023(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    spinner, reader, now = spin.ReplySpin(100), _reader(), _now(a)
    skipped_after: list[int] = []
    for _ in range(12):
        assert spinner.reply(now, None, reader) is NOT_ENOUGH_DATA  # a miss
        skipped_after.append(spinner.skip)
        b.sendall(b"+x\r\n")  # a reply waiting: the calls that do not spin leave it
        while spinner.skip:
            assert spinner.reply(now, None, reader) is NOT_ENOUGH_DATA
        assert a.recv(100) == b"+x\r\n"
    assert skipped_after == [1, 3, 7, 15, 31, 63, 127, 255, 511, 1023, 1023, 1023]
    b.sendall(b"+ok\r\n")
    assert spinner.reply(now, None, reader) == b"ok"  # a hit: the next miss skips one again
    assert spinner.misses == 0
    assert spinner.reply(now, None, reader) is NOT_ENOUGH_DATA and spinner.skip == 1


def test_no_spin_without_a_read_of_its_own_or_with_a_callback_ready(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    spinner, reader = spin.ReplySpin(SECOND_US), _reader()
    b.sendall(b"+ok\r\n")
    # (a budget of a second: a spin here would have read the reply)
    assert spinner.reply(None, None, reader) is NOT_ENOUGH_DATA  # TLS
    assert spinner.reply(_now(a), deque([object()]), reader) is NOT_ENOUGH_DATA
    assert spinner.reply(_now(a), deque(), reader) == b"ok"


def test_an_eof_during_a_spin_fails_the_read_as_a_lost_connection(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    with pytest.raises(RedisConnectionError):
        spin.ReplySpin(SECOND_US).reply(_now(a), None, _reader())


def test_a_lane_on_one_cpu_does_not_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    import redis

    monkeypatch.setattr(spin, "cpus", lambda: 1)
    assert direct.Lane(Redis(), spin_us=50)._spin is None
    assert sync_lane.SyncLane(redis.Redis(), spin_us=50)._spin is None
    monkeypatch.setattr(spin, "cpus", lambda: 2)
    assert direct.Lane(Redis(), spin_us=50)._spin is not None
    assert sync_lane.SyncLane(redis.Redis(), spin_us=50)._spin is not None
    assert direct.Lane(Redis(), spin_us=0)._spin is None
    assert sync_lane.SyncLane(redis.Redis(), spin_us=0)._spin is None


def test_the_sync_lane_spins_only_on_a_blocking_plain_socket(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """A socket with Python's own timeout polls before a recv, for as long
    as the timeout, whatever its flags, and a TLS socket takes no flags: no
    spin on either (the lane's plain sockets keep their timeout in the
    kernel on Linux, kernel_timeouts)."""
    from types import SimpleNamespace

    a, b = pair
    a.settimeout(None)
    blocking = SimpleNamespace(_sock=a)
    read = sync_lane.read_now(blocking)
    assert read is not None and sync_lane.read_now(blocking) is read  # made once a socket
    b.sendall(b"+ok\r\n")
    assert spin.ReplySpin(SECOND_US).reply(read, None, _reader()) == b"ok"
    a.settimeout(5.0)
    assert sync_lane.read_now(SimpleNamespace(_sock=a)) is None
    # a TLS socket, even without a timeout: its reads are the TLS layer's
    with ssl.create_default_context().wrap_socket(socket.socket(), server_hostname="x",
                                                  do_handshake_on_connect=False) as tls:
        tls.settimeout(None)
        assert sync_lane.read_now(SimpleNamespace(_sock=tls)) is None


def test_a_spin_gives_its_cpu_to_a_waiting_process_between_reads(
        pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch) -> None:
    """Between two reads that found nothing the spin yields its CPU (to a
    process waiting for it, where one is: on a busy host, Redis or another
    program); a reply there at the first read is taken with no yield."""
    if hasattr(os, "sched_yield"):
        assert spin._SCHED_YIELD is os.sched_yield
    a, b = pair
    yields: list[int] = []
    monkeypatch.setattr(spin, "_SCHED_YIELD", lambda: yields.append(1))
    spinner = spin.ReplySpin(SECOND_US)
    assert _spun_while_sent_later(spinner, pair, b"+ok\r\n", 0.02) == b"ok"
    assert len(yields) > 0
    yields.clear()
    b.sendall(b"+now\r\n")
    assert spinner.reply(_now(a), None, _reader()) == b"now"
    assert yields == []

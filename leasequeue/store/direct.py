"""Runs scripts on one pooled connection, sending EVALSHA and reading the
reply directly.

- ``Lane.run``: the hot path on one Redis. redis-py's per-command machinery
  (retry wrapper, pool bookkeeping, response callbacks) cost about 40 us a
  call on top of the round trip, and taking a connection from the pool costs
  a lock and a zero-timeout read of the socket (an extra turn of the event
  loop) per call. A lane takes connections from the pool once and keeps the
  idle ones itself: a connection goes back to the lane only after a reply was
  read in full, so it never holds a stale reply; any error or cancellation
  closes it. It reloads on NOSCRIPT and retries once on a dropped connection.
  On a plain connection (TCP, TLS or a Unix socket; not Sentinel's) it also
  skips redis-py's send and read wrappers (``_send_and_read``): redis-py
  sends through ``asyncio.wait_for``, a task and a turn of the event loop of
  its own per call, and times the read with a second timer, about 60 us of
  client CPU a call on this project's 2-core benchmark machine, as much as
  the rest of the round trip. The common call (an idle direct connection)
  runs inline in ``Lane.run``, with no coroutine between it and the read:
  about 3 us of client CPU a call less than through the general path.
- ``run_and_wait``: the opt-in durable mode, a script then WAIT on the same
  connection (WAIT counts the replicas that have the writes of its own
  connection). Replication is asynchronous; without it a failover can lose
  writes the old master acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

import anyio
import hiredis
from hiredis import PushNotification
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _AsyncHiredisParser
from redis.asyncio import Redis
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError, SlotNotCoveredError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..loops import forget_in_child, task_of
from .connection import KEPT_IN_CHILD, forget_pool_in_child, is_cluster
from .spin import LoopTurn, ReplySpin, reply_spin
from .translate import TOPOLOGY_ERRORS, closed_transport

T = TypeVar("T")

Call = tuple[Sequence[bytes], Sequence[Any]]  # a script call's keys and arguments


class Lane:
    """The connections the scripts of one client use, kept out of the pool's
    per-call bookkeeping. They stay in the pool's in-use set, so closing the
    pool closes them.

    A connection serves the event loop it was made on, in the process that
    made it. In a forked child every lane forgets its connections and its
    pool's (_forget_in_child); on another loop than theirs (an App used
    again after asyncio.run closed the loop it ran on) a lane forgets those
    of loops not running here (_forget_other_loops). Before, a child wrote
    on its parent's sockets (a child killed after its write left the
    parent's connection a reply behind, each call then reading the call
    before's reply), and the next loop's call wrote on the closed loop's
    transport, its script run, then failed (RuntimeError: Event loop is
    closed); found by a review (2026-12-07)."""

    def __init__(self, redis: Redis, spin_us: int = 0) -> None:
        self._pool: Any = redis.connection_pool
        self._idle: list[Any] = []
        # the one-job enqueue's wait for its reply (run(spin=True)); None: off
        self._spin = reply_spin(spin_us)
        self._turn = LoopTurn()  # whether a spin would hold the loop's other work
        forget_in_child(self)

    def _forget_in_child(self) -> None:
        """In a forked child: the idle connections, and every connection of
        the pool, are the parent's sockets: forgotten, never closed, kept
        from the collector (connection.KEPT_IN_CHILD, forget_pool_in_child);
        the child connects anew, on its own loop."""
        KEPT_IN_CHILD.extend(self._idle)
        self._idle.clear()
        forget_pool_in_child(self._pool)

    def _idle_here(self) -> list[Any]:
        """The idle connections, once those of a loop not running here are
        forgotten (_forget_other_loops): the last one taken stands for all,
        as they are forgotten together."""
        idle = self._idle
        if idle and not _here(idle[-1]):
            self._forget_other_loops()
        return idle

    async def _connection(self) -> Any:
        """A connection from the pool, of the loop running here: one of
        another loop (redis-py's pool is not loop-aware: a pipeline's, left
        there on a loop that closed since) is forgotten with the others of
        such loops, and another taken."""
        while True:
            conn = await self._pool.get_connection()
            if _here(conn):
                return conn
            self._forget_other_loops(conn)

    def _forget_other_loops(self, taken: Any = None) -> None:
        """The idle connections of an event loop not running here (one that
        closed, or stopped for another in this thread): forgotten (their
        transport cannot be used, nor closed, from this loop) and taken out
        of the pool's in-use set, which would count them; the lane connects
        anew on this loop (_connection, which passes over the pool's own of
        such a loop the same way: ``taken``, one the pool just handed out).
        The idle list is changed in place: a call of the other loop holding
        it, resumed later, puts its connection back where the next call
        here finds and forgets it."""
        pool = self._pool
        in_use = getattr(pool, "_in_use_connections", None)
        keep = []
        for conn in self._idle:
            if _here(conn):
                keep.append(conn)
            elif in_use is not None:
                in_use.discard(conn)
        self._idle[:] = keep
        if taken is not None and in_use is not None:
            in_use.discard(taken)

    async def run(self, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any],
                  retry: bool = True, read_only: bool = False,
                  packed: bytes | None = None, spin: bool = False) -> Any:
        """EVALSHA on a lane connection (one Redis or a Sentinel master). With
        ``retry``, a dropped connection (a Redis restart) is retried once;
        ``read_only`` sends EVALSHA_RO (a no-writes script). ``packed``: the
        call's whole bytes, formatted by the caller (scripts.OneJobCalls, an
        EVALSHA): ``keys`` then serve only to name the call, and ``args``
        and ``read_only`` are not read. ``spin``: the reply may be waited
        for on the socket itself, within the lane's budget (ReplySpin)."""
        command = "EVALSHA_RO" if read_only else "EVALSHA"
        attempts: tuple[int, ...] = (1, 2)
        if spin and self._turn.overdue():
            await asyncio.sleep(0)  # the loop's turn: spun calls held it a streak's bound
        idle = self._idle
        if idle and _direct_here(idle[-1]):
            # the hot path, inline: an idle direct connection of this loop (one
            # of another goes the general way, which forgets it), the call packed,
            # written and its reply read, with no coroutine between this one
            # and the read (each level cost about 1 us a call). What it does
            # not finish goes the general way below: NOSCRIPT (the error
            # reply was read, the connection is clean), arguments hiredis
            # cannot pack, and a dropped connection (its retry)
            try:
                if packed is None:
                    packed = _pack_evalsha(script.sha, keys, args, command)
            except _NotDirect:
                pass
            else:
                conn = idle.pop()
                try:
                    _write(conn, packed)
                    spinner = self._spin if spin else None
                    reply = await (_read(conn) if spinner is None
                                   else _read_spinning(conn, spinner, self._turn))
                except NoScriptError:
                    idle.append(conn)
                except ResponseError:
                    idle.append(conn)  # an error reply was read: the connection is clean
                    raise
                except (RedisConnectionError, RedisTimeoutError):
                    await self._drop(conn)
                    if not retry:
                        raise
                    attempts = (2,)  # this was the first attempt
                except BaseException:
                    await self._drop(conn)
                    raise
                else:
                    idle.append(conn)
                    return reply
        return await self._run(script, keys, args, command, retry, attempts, packed)

    async def _run(self, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any],
                   command: str, retry: bool, attempts: tuple[int, ...],
                   packed: bytes | None = None) -> Any:
        """run()'s general way: on any lane connection, NOSCRIPT loads the
        script and sends the call again, and a dropped connection is retried
        once (``attempts``: (1, 2), or (2,) after run()'s own first try).
        ``packed``: the call's bytes when run() has them (the caller's, or
        its own hot path's), written as they are."""

        async def call(conn: Any) -> Any:
            try:
                return await _evalsha(conn, script.sha, keys, args, command, True, packed)
            except NoScriptError:
                await _load(conn, script)
                return await _evalsha(conn, script.sha, keys, args, command, True, packed)

        for attempt in attempts:
            try:
                return await self._on_connection(call)
            except (RedisConnectionError, RedisTimeoutError):
                # a stale connection (Redis restarted), dropped: one retry
                if attempt == 2 or not retry:
                    raise
        raise AssertionError("unreachable")

    async def run_many(self, script: AsyncScript, calls: Iterable[Call],
                       handle: Callable[[Any], None]) -> None:
        """EVALSHA per call, in order, each reply given to ``handle`` in order:
        pipelined on one direct connection, each call written before the
        reply to the one before it is read (two in flight, and Redis runs
        one connection's commands in order), so the client packs the next
        call and handles a reply while Redis runs the other. ``calls`` is
        read lazily, so building their arguments overlaps too.

        The first call goes through run() (it loads the script on NOSCRIPT and
        checks the connection). After that, anything unexpected (an error
        reply, a lost connection, a timeout, arguments hiredis cannot pack)
        drops the connection and sends every call not yet answered through
        run(), one after the other, which raises what is wrong: a call that
        ran and lost its reply runs again, as run()'s own retry does. On a
        connection run() does not drive directly (Sentinel's), every call
        goes through run()."""
        pending: deque[Call] = deque()
        rest = iter(calls)
        first = next(rest, None)
        if first is None:
            return
        handle(await self.run(script, *first))
        idle = self._idle_here()
        conn = idle.pop() if idle else await self._connection()
        if not _direct_io(conn):  # a Sentinel connection: redis-py's path, call by call
            self._idle.append(conn)
            for keys, args in rest:
                handle(await self.run(script, keys, args))
            return
        try:
            for call in rest:
                pending.append(call)  # before the write: a failed one is sent again
                _write(conn, _pack_evalsha(script.sha, *call))
                if len(pending) == 2:
                    reply = await _read(conn)
                    pending.popleft()
                    handle(reply)
            while pending:
                reply = await _read(conn)
                pending.popleft()
                handle(reply)
        except (_NotDirect, ResponseError, RedisConnectionError, RedisTimeoutError):
            await self._drop(conn)
            for keys, args in [*pending, *rest]:
                handle(await self.run(script, keys, args))
            return
        except BaseException:
            await self._drop(conn)
            raise
        self._idle.append(conn)

    async def blpop(self, keys: Sequence[str], block_for: float) -> Any:
        """BLPOP on a lane connection (the idle claimer's wait for a wake
        token): its reply is the first hop of a job's way to a sleeping
        worker, so it takes the direct path too. The read may wait
        ``block_for`` beyond the socket timeout. A call cut short (cancelled,
        timed out) drops its connection, which a blocked reply would foul."""
        command: Any = ("BLPOP", *keys, block_for)  # (hiredis's stub types a 1-tuple)

        async def call(conn: Any) -> Any:
            if _direct_io(conn):
                return await _send_and_read(conn, hiredis.pack_command(command), wait=block_for)
            await conn.send_command(*command)
            return await conn.read_response(timeout=block_for + (conn.socket_timeout or 0))

        return await self._on_connection(call)

    async def blpop_then(self, keys: Sequence[str], block_for: float, script: AsyncScript,
                         script_keys: Sequence[bytes], args: Sequence[Any]) -> tuple[Any, Any]:
        """BLPOP, then EVALSHA written right behind it on the same connection:
        Redis runs one connection's commands in order, so the script runs as
        soon as the BLPOP ends (a token, or ``block_for`` passed), with no
        round trip to the client between them. (The BLPOP's reply, the
        script's reply.) NOSCRIPT loads the script and runs it again on the
        connection; a call cut short drops the connection, as blpop() does
        (the script may have run: the caller's script must be idempotent, as
        the claim is by its claim id). A connection not driven directly
        (Sentinel's) sends the two one after the other."""
        blpop: Any = ("BLPOP", *keys, block_for)

        async def call(conn: Any) -> tuple[Any, Any]:
            if _direct_io(conn):
                packed = hiredis.pack_command(blpop) + _pack_evalsha(script.sha, script_keys, args)
                _write(conn, packed)
                try:
                    popped = await _read(conn, wait=block_for)
                except ResponseError:
                    # an error reply to the BLPOP (MISCONF, BUSY, NOPERM...): the
                    # script's reply is read too, so the connection stays in
                    # step (the claim behind it may have run: its caller claims
                    # again with the same claim id)
                    with contextlib.suppress(ResponseError):
                        await _read(conn)
                    raise
                try:
                    return popped, await _read(conn)
                except NoScriptError:
                    pass  # both replies read: the connection is clean
            else:
                await conn.send_command(*blpop)
                popped = await conn.read_response(timeout=block_for + (conn.socket_timeout or 0))
                try:
                    return popped, await _evalsha(conn, script.sha, script_keys, args)
                except NoScriptError:
                    pass
            await _load(conn, script)
            return popped, await _evalsha(conn, script.sha, script_keys, args, direct=True)

        result: tuple[Any, Any] = await self._on_connection(call)
        return result

    async def _on_connection(self, call: Callable[[Any], Awaitable[Any]]) -> Any:
        """``call`` on an idle lane connection (or a new one from the pool).
        The connection goes back to the lane only after a reply was read in
        full, an error reply too; after anything else (a lost connection, a
        timeout, a cancellation mid-call, which may leave a reply unread) it
        is dropped."""
        idle = self._idle_here()
        conn = idle.pop() if idle else await self._connection()
        try:
            reply = await call(conn)
        except ResponseError:
            self._idle.append(conn)  # an error reply was read: the connection is clean
            raise
        except BaseException:
            await self._drop(conn)
            raise
        self._idle.append(conn)
        return reply

    async def _drop(self, conn: Any) -> None:
        # nowait, as redis-py's own error path: closing a connection whose
        # peer went silent must not wait for its buffered bytes (a timeout
        # raised here would skip the retry and keep it out of the pool)
        conn.__dict__.pop("_lq_proto", None)  # (its old stream and transport with it)
        with anyio.CancelScope(shield=True):
            await conn.disconnect(nowait=True)
            await self._pool.release(conn)


def _here(conn: Any) -> bool:
    """Whether a connection serves the event loop running here: the loop
    its lane protocol was installed on (else its stream's: asyncio's
    StreamReader keeps the loop it was made on, uvloop's too) is stepping a
    task now (the caller's: loops.task_of, a C lookup, where asking for the
    running loop makes a system call on Python 3.11). One not connected
    (no stream) is taken as it is: it connects on this loop."""
    proto = conn.__dict__.get("_lq_proto")
    reader = getattr(conn, "_reader", None)
    if proto is not None and proto.stream is reader:
        return task_of(proto.loop) is not None
    loop = getattr(reader, "_loop", None)  # (a protocol of an older stream says nothing)
    return loop is None or task_of(loop) is not None


def _direct_here(conn: Any) -> bool:
    """_direct_io and _here in one look, for run()'s hot path: an idle
    connection the lane read before, on the stream it had then, is direct,
    and of this loop when its protocol's loop steps a task now."""
    proto = conn.__dict__.get("_lq_proto")
    if proto is not None and proto.stream is conn._reader:
        return task_of(proto.loop) is not None
    return _here(conn) and _direct_io(conn)


async def run_and_wait(redis: Redis, script: AsyncScript, keys: Sequence[bytes],
                       args: Sequence[Any], replicas: int, timeout_ms: int) -> tuple[Any, int]:
    """The script's reply and how many replicas acknowledged its writes."""
    return await _on_node(redis, keys, lambda conn: _on(conn, script, keys, args, replicas,
                                                        timeout_ms))


async def run_once(redis: Redis, script: AsyncScript, keys: Sequence[bytes],
                   args: Sequence[Any]) -> Any:
    """A script call that is never sent again once it may have run, where
    no lane sends it (a cluster): redis-py's cluster client sends a call
    whose connection failed again, up to its retry count, and a call that
    ran and lost its reply would count twice (Scripts.run's ``retry``).
    Sent again only where Redis said it did not run it: NOSCRIPT (loaded,
    then sent), or a slot that moved (the slot map learnt, then sent to
    the new owner)."""
    def call(conn: Any) -> Awaitable[Any]:
        return _once(conn, script, keys, args)

    try:
        return await _on_node(redis, keys, call)
    except TOPOLOGY_ERRORS:
        return await _on_node(redis, keys, call)


async def _on_node(redis: Redis, keys: Sequence[bytes],
                   call: Callable[[Any], Awaitable[T]]) -> T:
    """``call`` on a connection of the Redis that owns ``keys[0]`` (a
    cluster's master for the slot, else the client's pool), outside the
    client's own retries."""
    if is_cluster(redis):
        cluster: Any = redis
        await cluster.initialize()  # a no-op once the slot map is loaded
        try:
            node = cluster.get_node_from_key(keys[0])
            conn = node.acquire_connection()
        except SlotNotCoveredError:
            await cluster.nodes_manager.initialize()
            raise
        try:
            return await call(conn)
        except (*TOPOLOGY_ERRORS, RedisConnectionError, RedisTimeoutError):
            # a failover: this path bypasses the client's own MOVED handling,
            # so it must learn the new masters itself
            await conn.disconnect()
            await cluster.nodes_manager.initialize()
            raise
        finally:
            node.release(conn)
    pool: Any = redis.connection_pool
    conn = await pool.get_connection()
    try:
        return await call(conn)
    finally:
        await pool.release(conn)


async def _once(conn: Any, script: AsyncScript, keys: Sequence[bytes],
                args: Sequence[Any]) -> Any:
    try:
        return await _evalsha(conn, script.sha, keys, args)
    except NoScriptError:  # (not run: loaded, then sent)
        await _load(conn, script)
        return await _evalsha(conn, script.sha, keys, args)


async def _on(conn: Any, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any],
              replicas: int, timeout_ms: int) -> tuple[Any, int]:
    reply = await _once(conn, script, keys, args)
    await conn.send_command("WAIT", replicas, timeout_ms)
    acked = int(await conn.read_response())
    return reply, acked


async def _evalsha(conn: Any, sha: str, keys: Sequence[bytes], args: Sequence[Any],
                   command: str = "EVALSHA", direct: bool = False,
                   packed: bytes | None = None) -> Any:
    """``direct``: the lane's calls, whose connection the lane drops on any
    error; the durable path (``_on``, also on a cluster's node connections)
    keeps redis-py's, which disconnects a failed connection itself.
    ``packed``: the call's bytes, packed by the caller (written as they are)."""
    if packed is not None:
        if direct and _direct_io(conn):
            return await _send_and_read(conn, packed)
        await conn.send_packed_command([packed])
        return await conn.read_response()
    if direct and _direct_io(conn):
        try:
            packed = _pack_evalsha(sha, keys, args, command)
        except _NotDirect:
            pass  # what hiredis cannot pack goes redis-py's way (DataError, or packed)
        else:
            return await _send_and_read(conn, packed)
    await conn.send_command(command, sha, len(keys), *keys, *args)
    return await conn.read_response()


READ_SIZE = 65536


def _direct_io(conn: Any) -> bool:
    """Whether ``_send_and_read`` may drive this connection: a plain one,
    connected, parsed by hiredis. A Sentinel connection keeps redis-py's own
    path, which turns a READONLY reply (a failover) into a reconnect to the
    new master."""
    proto = conn.__dict__.get("_lq_proto")
    if proto is not None and proto.stream is conn._reader:
        return True  # one this check passed, still on the stream it had then
    return (isinstance(conn, (Connection, UnixDomainSocketConnection))
            and not isinstance(conn, SentinelManagedConnection)
            and isinstance(conn._parser, _AsyncHiredisParser) and conn.is_connected)


async def _send_and_read(conn: Any, packed: bytes, wait: float = 0.0) -> Any:
    """One command on the connection's own stream and hiredis reader (those
    redis-py set up at connect, so the connection stays usable by redis-py):
    the bytes written without waiting for a drain (asyncio sends at once what
    the socket takes and buffers the rest), the reply read within the
    connection's socket timeout (plus ``wait``, what Redis may block before
    it answers; see _Watch). A timeout or a lost connection raises
    redis-py's TimeoutError or ConnectionError; the caller then drops the
    connection, whose stream may hold a partial reply."""
    _write(conn, packed)
    return await _read(conn, wait)


def _write(conn: Any, packed: bytes) -> None:
    if conn._reader._exception is not None:
        # a read timer that fired as its reply came in: never reuse the stream
        raise RedisConnectionError("Connection's stream is in error.")
    try:
        # the transport's own write (StreamWriter.write only calls it)
        conn._writer._transport.write(packed)
    except RuntimeError as exc:  # uvloop: the transport closed under the call
        if not closed_transport(exc):
            raise
        raise RedisConnectionError("Connection closed by server.") from exc


async def _read(conn: Any, wait: float = 0.0) -> Any:
    """The next reply on the connection (see _send_and_read); an error reply
    is raised. The bytes come through the connection's _LaneProtocol, which
    hands a whole reply to the read's future; the stream redis-py reads
    serves only when it holds bytes already (see _LaneProtocol)."""
    reader = conn._parser._reader
    reply = reader.gets()
    if reply is NOT_ENOUGH_DATA or isinstance(reply, PushNotification):
        stream = conn._reader
        proto, watch = _begin(conn, stream, wait)
        try:
            while True:
                if isinstance(reply, PushNotification):
                    # RESP3 (redis-py's default): a push (an invalidation, a
                    # maintenance notice) is no reply; redis-py's parser
                    # hands it to its handler and reads on, as here
                    await conn._parser.handle_push_response(reply)
                elif reply is not NOT_ENOUGH_DATA:
                    break
                elif proto is not None and _stream_empty(stream):
                    # (what the stream holds, an EOF or an error it kept, its
                    # own read below gives first)
                    waiter = proto.waiter = proto.loop.create_future()
                    try:
                        reply = await waiter
                    finally:
                        proto.waiter = None
                    continue
                else:
                    data = await stream.read(READ_SIZE)
                    if not data:
                        raise RedisConnectionError("Connection closed by server.")
                    reader.feed(data)
                reply = reader.gets()
        except _ReadTimeout:
            raise RedisTimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise RedisConnectionError(f"Error while reading from socket: {exc}") from exc
        finally:
            if watch is not None:
                watch.stream = None  # no read in flight
    if isinstance(reply, RedisError):  # hiredis gives error replies as values
        raise reply  # (-LOADING, -NOAUTH: a ConnectionError's kind, dropped and retried)
    return reply


async def _read_spinning(conn: Any, spin: ReplySpin, turn: LoopTurn) -> Any:
    """_read, the socket read first by ``spin`` (spin.py) where the lane's
    protocol would be handed the bytes: a socket of its own, nothing in
    redis-py's stream; not while ``turn`` says the loop's other work would
    wait for it."""
    proto = conn.__dict__.get("_lq_proto")
    stream = conn._reader
    if proto is not None and proto.stream is stream and _stream_empty(stream):
        try:
            read_now = proto.read_now  # (none: a TLS socket, which never spins)
            held = read_now is None or turn.held(proto.loop, proto.ready)
            reply = spin.reply(read_now, held, conn._parser._reader)
        except OSError as exc:
            raise RedisConnectionError(f"Error while reading from socket: {exc}") from exc
        if isinstance(reply, PushNotification):  # (RESP3: no reply; as _read)
            await conn._parser.handle_push_response(reply)
        elif reply is not NOT_ENOUGH_DATA:
            if isinstance(reply, RedisError):  # (as _read)
                raise reply
            return reply
    return await _read(conn)


def _stream_empty(stream: Any) -> bool:
    """Whether redis-py's stream holds nothing for a reader: no bytes, no
    EOF, no error it kept."""
    return not (stream._buffer or stream._eof or stream._exception is not None)


def _begin(conn: Any, stream: Any, wait: float) -> tuple[_LaneProtocol | None, _Watch | None]:
    """A read that waits starts: the connection's protocol (installed on
    its first read after a connect) and its read timer, armed."""
    proto = conn.__dict__.get("_lq_proto")
    if proto is None or proto.stream is not stream:
        proto = _LaneProtocol.install(conn)
    watch = None
    if conn.socket_timeout:
        watch = conn.__dict__.get("_lq_watch")
        if watch is None:
            watch = conn._lq_watch = _Watch()
        if proto is None:
            watch.begin(stream, conn.socket_timeout + wait)
        else:
            watch.begin(proto, conn.socket_timeout + wait, proto.loop)
    return proto, watch


class _LaneProtocol(asyncio.Protocol):
    """The protocol of a lane connection's transport, in front of the
    StreamReaderProtocol redis-py connected with (``inner``). A lane read
    waits on a future of its own, which data_received resolves with the
    whole reply, parsed by the connection's own hiredis reader: no
    StreamReader in between (its feed, its wait coroutine, the copy of its
    buffer and the read's bookkeeping each round trip).

    The connection stays redis-py's: bytes go to the stream instead (and
    redis-py's parser, which reads its hiredis reader before the stream,
    finds every byte in order) whenever the stream has bytes waiting or
    redis-py waits on it (its own commands: SCRIPT LOAD, a Sentinel
    connection's calls). Otherwise they are fed to the hiredis reader,
    which every reader of the connection consults first. A lost connection
    or an EOF fails the lane's read and reaches the stream as before."""

    __slots__ = ("inner", "loop", "parser", "read_now", "ready", "stream", "waiter")

    def __init__(self, inner: asyncio.StreamReaderProtocol, parser: Any,
                 stream: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self.parser = parser
        self.stream: Any = stream
        self.loop = loop
        self.waiter: asyncio.Future[Any] | None = None
        # a read of the socket that does not wait, for a ReplySpin: a plain
        # socket's (not TLS: its bytes are the TLS layer's to read)
        self.read_now: Callable[[], bytes] | None = None
        # asyncio's queue of ready callbacks (uvloop's is not readable)
        ready = getattr(loop, "_ready", None)
        self.ready: Any = ready if isinstance(ready, deque) else None

    @staticmethod
    def install(conn: Any) -> _LaneProtocol | None:
        """Put one in front of the connection's stream protocol (once per
        connect: a reconnect makes a new stream and transport); None where
        the transport has no StreamReaderProtocol to front."""
        transport = conn._writer.transport
        inner = transport.get_protocol()
        if isinstance(inner, _LaneProtocol):
            inner = inner.inner
        if not isinstance(inner, asyncio.StreamReaderProtocol):
            return None
        proto = _LaneProtocol(inner, conn._parser, conn._reader, asyncio.get_running_loop())
        transport.set_protocol(proto)
        conn._lq_proto = proto
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("sslcontext") is None \
                and transport.get_extra_info("ssl_object") is None:
            proto.read_now = partial(os.read, sock.fileno(), READ_SIZE)  # non-blocking
        return proto

    def data_received(self, data: bytes) -> None:
        stream = self.stream
        if stream._buffer or stream._waiter is not None:
            self.inner.data_received(data)  # in order behind the stream's bytes
            return
        reader = self.parser._reader
        reader.feed(data)
        waiter = self.waiter
        if waiter is not None:
            try:
                reply = reader.gets()
            except Exception as exc:  # not RESP (hiredis's InvalidResponse): the read fails
                self._fail_waiter(exc)
                return
            if reply is not NOT_ENOUGH_DATA:
                self.waiter = None
                if not waiter.done():
                    waiter.set_result(reply)

    def set_exception(self, exc: BaseException) -> None:
        """Fail the read in flight (the read timer's call). The stream keeps
        the error too: between two waits (in a push handler, or its reply
        just in) the read's next wait raises it, and no call writes on the
        connection again (its late reply would be read as the next call's)."""
        self._fail_waiter(exc)
        self.stream.set_exception(exc)

    def _fail(self, what: str) -> None:
        self._fail_waiter(RedisConnectionError(what))

    def _fail_waiter(self, exc: BaseException) -> None:
        """Fail the lane's read in flight, if one waits (its future is taken
        off first: nothing resolves it twice)."""
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_exception(exc)

    def eof_received(self) -> bool | None:
        self._fail("Connection closed by server.")
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"Error while reading from socket: {exc}" if exc else
                   "Connection closed by server.")
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _NotDirect(Exception):
    """hiredis cannot pack a call's arguments (redis-py's path encodes or
    refuses them)."""


def _pack_evalsha(sha: str, keys: Sequence[bytes], args: Sequence[Any],
                  command: str = "EVALSHA") -> bytes:
    """The one place a script call's bytes are built for the direct path."""
    try:
        packed: bytes = hiredis.pack_command((command, sha, len(keys), *keys, *args))
        return packed
    except TypeError:
        raise _NotDirect from None


class _ReadTimeout(Exception):
    """Set on the stream by the read timer: the pending read raises it."""


class _Watch:
    """The read timeout of one lane connection: one timer that stays armed
    while reads come and go, instead of a timer armed and cancelled per read.
    A read sets its deadline (two stores); the timer, when it fires, fails
    the read in flight if its deadline passed, re-arms itself for that
    deadline if not, and stays off while the connection is idle. So a busy
    connection fires it about once per socket timeout, and a read still fails
    within its own deadline (plus the loop's lag).

    Why: on this project's VM benchmark machine a timer armed and cancelled
    per round trip cost 11-12 us of client CPU per PING in two runs of
    benchmarks/read_timer.py out of three (the third: under 1 us), one
    timer left pending under 1 us (benchmarks/results/read_timer.txt); a
    one-job enqueue costs about 100-150 us of client CPU there."""

    __slots__ = ("deadline", "handle", "loop", "stream")

    def __init__(self) -> None:
        self.deadline = 0.0
        # what fails the read in flight: its connection's _LaneProtocol, or
        # the stream where it has none
        self.stream: asyncio.StreamReader | _LaneProtocol | None = None
        self.handle: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def begin(self, stream: asyncio.StreamReader | _LaneProtocol, timeout: float,
              loop: asyncio.AbstractEventLoop | None = None) -> None:
        """A read through ``stream`` starts: it must end within ``timeout``.
        ``loop``: the running loop, when the caller knows it (on Python 3.11
        asking costs a getpid() system call)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        self.deadline = deadline = loop.time() + timeout
        self.stream = stream
        handle = self.handle
        if handle is None or self.loop is not loop or handle.when() > deadline:
            # none armed (or on a loop that is gone), or armed for later than
            # this read's deadline (after a long blocking wait): arm it anew
            if handle is not None:
                handle.cancel()
            self.loop = loop
            self.handle = loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self.handle = None
        stream = self.stream
        if stream is None or self.loop is None:
            return  # idle: the next read arms it
        if self.loop.time() >= self.deadline:
            stream.set_exception(_ReadTimeout())
        else:
            self.handle = self.loop.call_at(self.deadline, self._fire)


async def _load(conn: Any, script: AsyncScript) -> None:
    """SCRIPT LOAD after a NOSCRIPT, redis-py's way. A read timer that fired
    as the NOSCRIPT came in left its error on the stream (_Watch), which
    redis-py's write (its drain) and read raise: a timeout of the call,
    dropped by the lane and sent again on another connection (it reached
    the caller as the lane's own _ReadTimeout, untranslated and not sent
    again: found by a review)."""
    try:
        await conn.send_command("SCRIPT", "LOAD", script.script)
        await conn.read_response()
    except _ReadTimeout:
        raise RedisTimeoutError("Timeout reading from socket") from None

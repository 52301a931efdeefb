"""The sync producer's script calls on connections it drives itself (the
synchronous twin of direct.Lane).

redis-py's synchronous path costs more than the round trip it wraps: its
per-command machinery (the pool's lock and fork check, the retry wrapper, its
Python command packer, the response callbacks). One enqueue per call, in one
run (benchmarks/sync_enqueue.py, benchmarks/results/sync_enqueue.txt): 94 us
of client CPU per enqueue on this lane against 142 us by redis-py's
``send_command``/``read_response`` on a pooled connection (what SyncApp did
before) and 207 us by redis-py's ``Script`` call; 1.41x the async App's
rate, where the pooled path was 1.05x.

So a ``SyncLane`` takes connections from the client's pool once and keeps the
idle ones itself; a call packs its command with hiredis (or is handed its
bytes whole: a one-job enqueue, scripts.OneJobCalls), writes it with one
``sendall`` and feeds the connection's own hiredis reader from ``recv``. A
connection goes back to the lane only after a reply was read in full (an
error reply too); after anything else (a timeout, a lost connection, an
interrupt mid-call) it is disconnected and given back to the pool, which
reconnects it when next asked. A dropped connection is retried once on a
fresh one: every producer script is idempotent or deduplicated by job id,
as on the async lane.

- Threads: each call holds its connection alone (taken from and given back
  to a list, atomic under the GIL), so threads of a WSGI server share a lane.
- Fork: a child process must never read from its parent's sockets; the lane
  forgets its idle connections in a forked child (the pool resets itself
  there too).
- Timeouts in the kernel: a socket with a timeout makes Python ``poll()``
  before each ``send`` and ``recv``, two system calls more a round trip
  (about 1.5 us of client CPU and of wall time a call on an Intel Xeon
  host, benchmarks/results/sync_socket_timeout.txt). The lane turns a
  connection it takes from the pool into a blocking socket whose kernel
  timeouts (SO_RCVTIMEO, SO_SNDTIMEO) are the connection's socket_timeout:
  a call that waits longer fails alike (EAGAIN, read here as redis-py's
  TimeoutError), with one system call each way (Linux; a TLS socket keeps
  Python's timeout, whose reads may not end on a record's edge).
- A connection this module does not drive (Sentinel's, which turns a
  READONLY reply into a reconnect to the new master, or one without the
  hiredis parser) keeps redis-py's ``send_command``/``read_response``."""

from __future__ import annotations

import socket
import ssl
import struct
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import redis
from hiredis import PushNotification
from redis._parsers.hiredis import NOT_ENOUGH_DATA, _HiredisParser
from redis.commands.core import Script
from redis.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import SentinelManagedConnection

from ..loops import forget_in_child
from .direct import READ_SIZE, _NotDirect, _pack_evalsha
from .spin import ReplySpin, reply_spin

_DONTWAIT = getattr(socket, "MSG_DONTWAIT", 0)

class SyncLane:
    """The connections the producer scripts of one synchronous client use,
    kept out of the pool's per-call bookkeeping. They stay in the pool's
    in-use set, so closing the pool closes them."""

    def __init__(self, client: redis.Redis, spin_us: int = 0) -> None:
        self._pool: Any = client.connection_pool
        self._idle: list[Any] = []
        # the one-job enqueue's wait for its reply (spin.py); None: off
        self._spin = reply_spin(spin_us)
        forget_in_child(self)

    def run(self, script: Script, keys: Sequence[bytes], args: Sequence[Any],
            packed: bytes | None = None) -> Any:
        """EVALSHA (the script loaded on NOSCRIPT); a dropped connection or a
        timeout is retried once on another connection. ``packed``: the call's
        bytes, packed by the caller (scripts.OneJobCalls); ``args`` is then
        not read."""
        for attempt in (1, 2):
            idle = self._idle
            conn = idle.pop() if idle else self._connection()
            try:
                if packed is not None and direct_io(conn):
                    try:  # the hot path, inline: three Python calls fewer than _call
                        reply = _send_and_read(conn, packed, self._spin)
                    except NoScriptError:
                        load_script(conn, script)
                        reply = _send_and_read(conn, packed)
                else:
                    reply = _call(conn, script, keys, args, packed)
            except ResponseError:
                self._idle.append(conn)  # an error reply was read whole: the connection is clean
                raise
            except (RedisConnectionError, RedisTimeoutError):
                self._drop(conn)
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self._drop(conn)  # cut mid-call (an interrupt): a reply may be left unread
                raise
            self._idle.append(conn)
            return reply
        raise AssertionError("unreachable")

    def _connection(self) -> Any:
        """A connection from the pool, its timeouts moved into the kernel
        when this module drives its socket (kernel_timeouts)."""
        conn = self._pool.get_connection()
        if direct_io(conn):
            kernel_timeouts(conn._sock)
        return conn

    def _drop(self, conn: Any) -> None:
        try:
            conn.disconnect()
        finally:
            self._pool.release(conn)

    def _forget_in_child(self) -> None:
        """In a forked child (loops.forget_in_child): the idle connections
        are the parent's sockets."""
        self._idle = []


def direct_io(conn: Any) -> bool:
    """Whether this module drives ``conn``'s socket itself: a plain TCP, TLS
    or Unix-socket connection, connected, parsed by hiredis (not Sentinel's)."""
    return (isinstance(conn, (Connection, UnixDomainSocketConnection))
            and not isinstance(conn, SentinelManagedConnection)
            and isinstance(conn._parser, _HiredisParser) and conn._sock is not None)


def kernel_timeouts(sock: socket.socket) -> None:
    """Make ``sock`` blocking with its timeout as SO_RCVTIMEO and SO_SNDTIMEO
    (Linux, not TLS; else, or without a timeout, left as it is): a send or
    recv is then one system call, where Python polls before each on a
    socket with a timeout of its own."""
    timeout = sock.gettimeout()
    if timeout is None or not timeout > 0 or isinstance(sock, ssl.SSLSocket) \
            or not sys.platform.startswith("linux"):
        return
    seconds = int(timeout)
    micros = min(999_999, round((timeout - seconds) * 1e6))
    if seconds == 0 and micros == 0:
        micros = 1  # a zero timeval is no timeout at all
    value = struct.pack("ll", seconds, micros)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    sock.settimeout(None)


def _call(conn: Any, script: Script, keys: Sequence[bytes], args: Sequence[Any],
          packed: bytes | None = None) -> Any:
    try:
        return _evalsha(conn, script.sha, keys, args, packed)
    except NoScriptError:
        load_script(conn, script)
        return _evalsha(conn, script.sha, keys, args, packed)


def load_script(conn: Any, script: Script) -> None:
    """Load ``script`` on ``conn`` (a reply of NOSCRIPT: a SCRIPT FLUSH, a
    restart): rare, so redis-py's own path, as direct._load. Shared with
    sync_scripts (the durable path)."""
    conn.send_command("SCRIPT", "LOAD", script.script)
    conn.read_response()


def _evalsha(conn: Any, sha: str, keys: Sequence[bytes], args: Sequence[Any],
             packed: bytes | None = None) -> Any:
    if packed is not None:  # the caller packed the call: written as it is
        if direct_io(conn):
            return _send_and_read(conn, packed)
        conn.send_packed_command([packed])  # a list: it iterates what it is given
        return conn.read_response()
    if direct_io(conn):
        try:
            packed = _pack_evalsha(sha, keys, args)  # the bytes the async lane sends
        except _NotDirect:
            pass  # what hiredis cannot pack goes redis-py's way (DataError, or packed)
        else:
            return _send_and_read(conn, packed)
    conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
    return conn.read_response()


def read_now(conn: Any) -> Callable[[], bytes] | None:
    """A read of ``conn``'s socket that does not wait, for a ReplySpin (made
    once per socket); None for a TLS socket (its reads are the TLS layer's,
    which takes no flags), a socket with Python's own timeout (Python polls
    before such a recv, for as long as the timeout: no spin then; the lane's
    sockets keep their timeout in the kernel on Linux, kernel_timeouts) or
    without MSG_DONTWAIT."""
    sock = conn._sock
    kept = conn.__dict__.get("_lq_read_now")
    if kept is not None and kept[0] is sock:
        known: Callable[[], bytes] | None = kept[1]
        return known
    read = None
    if _DONTWAIT and not isinstance(sock, ssl.SSLSocket) and sock.gettimeout() is None:
        read = partial(sock.recv, READ_SIZE, _DONTWAIT)
    conn._lq_read_now = (sock, read)
    return read


def _send_and_read(conn: Any, packed: bytes, spin: ReplySpin | None = None) -> Any:
    """One command on the connection's socket and hiredis reader (those
    redis-py set up at connect, so the connection stays usable by redis-py).
    Each recv waits at most the socket's timeout (set by redis-py at
    connect). A timeout or a lost connection raises redis-py's TimeoutError
    or ConnectionError; the caller then drops the connection."""
    sock = conn._sock
    reader = conn._parser._reader
    try:
        sock.sendall(packed)
        # the reply read off the socket first, within the spin's budget (spin.py)
        reply = NOT_ENOUGH_DATA if spin is None else spin.reply(read_now(conn), None, reader)
        if reply is NOT_ENOUGH_DATA:
            reply = reader.gets()
        while True:
            if reply is NOT_ENOUGH_DATA:
                data = sock.recv(READ_SIZE)
                if not data:
                    raise RedisConnectionError("Connection closed by server.")
                reader.feed(data)
            elif isinstance(reply, PushNotification):
                # RESP3: a push (an invalidation, a maintenance notice) is no
                # reply; redis-py's parser hands it to its handler, as here
                conn._parser.handle_push_response(reply)
            else:
                break
            reply = reader.gets()
    except (TimeoutError, BlockingIOError):  # Python's timeout; the kernel's (EAGAIN)
        raise RedisTimeoutError("Timeout reading from socket") from None
    except OSError as exc:
        raise RedisConnectionError(f"Error while reading from socket: {exc}") from exc
    if isinstance(reply, RedisError):  # hiredis gives error replies as values
        raise reply  # (-LOADING, -NOAUTH: a ConnectionError's kind, dropped and retried)
    return reply

"""A small threaded TCP proxy on loopback, to cut one client off from Redis.

``cut()`` resets every open connection (RST, as a dropped NAT entry or a
restarted load balancer would) and stops listening, so new connections are
refused; ``heal()`` listens again on the same port. The client sees real
socket errors, not a mock.

``blackhole()`` is the silent kind of failure: the open connections stay open
but nothing they carry is delivered any more, in either direction (a host that
vanished without a RST, a failover that moved the address); new connections
are proxied as usual."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable


def _reset(sock: socket.socket) -> None:
    """Close with RST rather than FIN: the peer gets ECONNRESET at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes a pump thread blocked in recv()
    with contextlib.suppress(OSError):
        sock.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._frozen: set[tuple[socket.socket, socket.socket]] = set()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self.accepted = 0  # connections proxied so far

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- control --------------------------------------------------------------

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept_loop, listener)

    def cut(self) -> None:
        """Drop every connection and refuse new ones until heal()."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown wakes the blocked accept(); close releases the port
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, set()
            self._frozen.clear()
        for client, upstream in pairs:
            _reset(client)
            _reset(upstream)

    def blackhole(self) -> int:
        """Stop delivering anything on the open connections; returns how many."""
        with self._lock:
            self._frozen |= self._pairs
            return len(self._pairs)

    def heal(self) -> None:
        """Listen again on the same port."""
        self.start()

    def close(self) -> None:
        self.cut()
        for thread in self._threads:
            thread.join(5)

    # -- plumbing -------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed by cut()
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut while we were connecting
                    _reset(client)
                    _reset(upstream)
                    return
                self._pairs.add((client, upstream))
                self.accepted += 1
            pair = (client, upstream)
            self._spawn(self._pump, client, upstream, pair)
            self._spawn(self._pump, upstream, client, pair)

    def _pump(self, source: socket.socket, sink: socket.socket,
              pair: tuple[socket.socket, socket.socket]) -> None:
        try:
            while data := source.recv(65536):
                if pair not in self._frozen:
                    sink.sendall(data)
        except OSError:
            pass
        # one side ended: end the other too, and forget the pair. A pair
        # cut() took is cut()'s to reset: a shutdown here would send the
        # client a FIN ahead of cut()'s RST, and the client would see an EOF
        # where the test made a reset (the pump wakes from cut()'s SHUT_RD)
        with self._lock:
            if pair not in self._pairs:
                return
            self._pairs.discard(pair)
            self._frozen.discard(pair)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

"""What a socket timeout costs a blocking round trip: an empty script
(EVALSHA of `return 'queued'`) one call at a time on three sockets to this
harness's redis-server, rounds interleaved, medians:

- a socket with Python's timeout: Python polls before each send and recv
  (SyncApp's sockets before sync_lane.kernel_timeouts);
- a blocking socket without any timeout;
- a blocking socket with the timeout in the kernel (SO_RCVTIMEO and
  SO_SNDTIMEO: SyncApp's sockets since).

  python benchmarks/socket_timeout.py [N] [ROUNDS] > benchmarks/results/sync_socket_timeout.txt
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import struct
import sys
import time

import hiredis
import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cpu_model
from redis_server import RedisServer


def connect(port: int, timeout: float | None, in_kernel: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout)
    if in_kernel:
        value = struct.pack("ll", 5, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    return sock


def measure(port: int, n: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    client = redis.Redis(port=port)
    packed = hiredis.pack_command(("EVALSHA", client.script_load("return 'queued'"), 0))
    client.close()
    socks = {
        "Python's timeout, 5 s (a poll before each send and recv)": connect(port, 5.0, False),
        "blocking, no timeout": connect(port, None, False),
        "blocking, 5 s in the kernel (SO_RCVTIMEO, SO_SNDTIMEO)": connect(port, None, True),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in socks}
    for _ in range(rounds):
        for name, sock in socks.items():
            reader = hiredis.Reader()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(n):
                sock.sendall(packed)
                while reader.gets() is False:
                    reader.feed(sock.recv(65536))
            results[name].append(((time.process_time() - cpu) / n * 1e6,
                                  n / (time.perf_counter() - wall)))
    for sock in socks.values():
        sock.close()
    return results


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    with RedisServer() as server:
        results = measure(server.port, n, rounds)
    print(f"# python benchmarks/socket_timeout.py {n} {rounds}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {cpu_model()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"one empty script call at a time: {n} calls x {rounds} rounds (interleaved), medians")
    print(f"{'socket':58s} {'client CPU us/call':>18s} {'calls/s':>9s}")
    for name, samples in results.items():
        cpu = statistics.median(s[0] for s in samples)
        rate = statistics.median(s[1] for s in samples)
        print(f"{name:58s} {cpu:18.1f} {rate:9,.0f}")


if __name__ == "__main__":
    main()

"""One enqueue per call, layer by layer: the client CPU and the rate of each
layer of App.enqueue down to a bare round trip, so the part that is
leasequeue's own can be told from the floor of the event loop and the
socket. Each layer calls the one below it with what that one needs:

- ``App.enqueue``: the whole call;
- ``coalescer``: the job prepared (Producer.prepare), then the group
  commit's lone path (store/coalesce.py);
- ``Scripts.enqueue``: the job prepared, then the script call with its error
  translation and reply parsing;
- ``Lane.run``: the job prepared, its call's bytes formatted onto the kept
  head (scripts.OneJobCalls, as Scripts.enqueue does for one job), then
  EVALSHA on the lane (store/direct.py);
- ``Lane.run, no-op script, same arguments``: a script that returns at once,
  sent the enqueue's keys and arguments (what packing and sending them cost);
- ``Lane.run, no-op script``: the same without arguments;
- ``asyncio Protocol, no-op script``: a bare asyncio round trip, no
  leasequeue and no redis-py (the event loop's floor);
- ``SyncApp.enqueue`` and ``socket, no-op script``: the same for the sync
  producer and a blocking socket.

Layers alternate within each round, N calls each; medians of the rounds.
Client CPU (process_time) includes the kernel's share of the client's
sends, receives and wake-ups.

Run: python benchmarks/enqueue_layers.py [--rounds 5] [--calls 5000] [--loop uvloop]
     python benchmarks/enqueue_layers.py --callgrind [--loop uvloop]

With --callgrind, each layer's client instructions per call instead
(valgrind's callgrind: two children of 200 and 1,200 calls of that layer
alone, the difference over 1,000; PYTHONHASHSEED=0 and the collector off,
as benchmarks/one_job_calls.py). Without the kernel's share of the socket
calls, and repeatable on a busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import hiredis
import redis

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from instructions import _total
from redis_server import RedisServer

from leasequeue import App, JobRequest, SyncApp
from leasequeue.store.scripts import enqueue_args

NOOP_SCRIPT = "return 'queued'"


class _Bare(asyncio.Protocol):
    """One request at a time on a bare asyncio connection, parsed by hiredis."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiter: asyncio.Future[Any] | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        reply = self.reader.gets()
        if reply is not False and self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            waiter.set_result(reply)

    async def call(self, packed: bytes) -> Any:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(packed)
        return await self.waiter


class _Script:
    def __init__(self, sha: str) -> None:
        self.sha = sha


Samples = dict[str, list[tuple[float, float]]]  # layer -> (client CPU us/call, calls/s) per round


async def measure(url: str, port: int, rounds: int, calls: int,
                  only: str | None = None) -> Samples:
    app = App(url, prefix="layers")
    sync = SyncApp(url, prefix="layers")

    async def noop() -> None: ...

    app.job(noop)
    await app.enqueue("noop")  # scripts loaded, queue verified
    sync.enqueue("noop", queue="default")
    scripts = app.scripts
    qk = app.keys("default")
    lane: Any = scripts._lane
    keys = scripts._call_keys("enqueue", qk, ())
    client = redis.Redis(port=port)
    noop_script = _Script(client.script_load(NOOP_SCRIPT))
    client.close()
    _, sample = app.producer.prepare(JobRequest("noop"))
    sample_args = enqueue_args(scripts.settings, [sample])
    packed_noop = hiredis.pack_command(("EVALSHA", noop_script.sha, 0))
    loop = asyncio.get_running_loop()
    _, bare = await loop.create_connection(_Bare, "127.0.0.1", port)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def lane_one_job() -> Awaitable[Any]:  # the call Scripts.enqueue sends, its own script's
        call = scripts._one_job.call(scripts.settings, qk, new_job(), scripts._keys_of)
        assert call is not None
        packed, call_keys, name = call
        return lane.run(scripts._scripts[name], call_keys, (), packed=packed)

    def new_job() -> Any:
        return app.producer.prepare(JobRequest("noop"))[1]

    def blocking_call() -> Any:
        sock.sendall(packed_noop)
        reader = hiredis.Reader()
        while True:
            reader.feed(sock.recv(65536))
            reply = reader.gets()
            if reply is not False:
                return reply

    layers: dict[str, Callable[[], Awaitable[Any]] | Callable[[], Any]] = {
        "App.enqueue": lambda: app.enqueue("noop"),
        "coalescer": lambda: app.coalescer.enqueue(qk, new_job()),
        "Scripts.enqueue": lambda: scripts.enqueue(qk, [new_job()]),
        "Lane.run": lane_one_job,
        "Lane.run, no-op script, same arguments": lambda: lane.run(noop_script, keys,
                                                                   sample_args),
        "Lane.run, no-op script": lambda: lane.run(noop_script, [], []),
        "asyncio Protocol, no-op script": lambda: bare.call(packed_noop),
        "SyncApp.enqueue": lambda: sync.enqueue("noop", queue="default"),
        "socket, no-op script": blocking_call,
    }
    layers = {name: call for name, call in layers.items() if only in (None, name)}
    sync_layers = {"SyncApp.enqueue", "socket, no-op script"}
    results: Samples = {name: [] for name in layers}
    for _ in range(rounds):
        for name, call in layers.items():
            cpu, wall = time.process_time(), time.perf_counter()
            if name in sync_layers:
                for _ in range(calls):
                    call()
            else:
                for _ in range(calls):
                    await call()  # type: ignore[misc]
            results[name].append(((time.process_time() - cpu) / calls * 1e6,
                                  calls / (time.perf_counter() - wall)))
    sock.close()
    bare.transport.close()
    sync.close()
    await app.close()
    return results


LAYERS = ("App.enqueue", "coalescer", "Scripts.enqueue", "Lane.run",
          "Lane.run, no-op script, same arguments", "Lane.run, no-op script",
          "asyncio Protocol, no-op script", "SyncApp.enqueue", "socket, no-op script")


def run_measure(url: str, port: int, rounds: int, calls: int, loop: str,
                only: str | None = None) -> Samples:
    measured = measure(url, port, rounds, calls, only)
    if loop == "uvloop":
        import uvloop

        return uvloop.run(measured)
    return asyncio.run(measured)


def instructions(url: str, port: int, layer: str, loop: str,
                 small: int = 200, large: int = 1200) -> float:
    """Client instructions per call of ``layer``: this script as a child
    under callgrind, ``small`` then ``large`` calls of that layer alone."""
    totals = []
    for n in (small, large):
        with tempfile.TemporaryDirectory(prefix="lq-layers-") as work:
            out = Path(work) / "callgrind.out"
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            sys.executable, __file__, "--child", url, str(port), layer,
                            "--calls", str(n), "--loop", loop],
                           env={**os.environ, "PYTHONHASHSEED": "0"}, check=True,
                           capture_output=True, timeout=1800)
            totals.append(_total(out))
    return (totals[1] - totals[0]) / (large - small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                        help="the event loop of the async layers")
    parser.add_argument("--callgrind", action="store_true",
                        help="client instructions per call of each layer (valgrind)")
    parser.add_argument("--child", nargs=3, metavar=("URL", "PORT", "LAYER"),
                        help=argparse.SUPPRESS)  # one layer alone, under callgrind
    args = parser.parse_args()
    if args.child:
        gc.disable()  # (see the docstring)
        url, port, layer = args.child
        run_measure(url, int(port), 1, args.calls, args.loop, layer)
        return
    with RedisServer() as server:
        if args.callgrind:
            print(f"client instructions per call, layer by layer, on {args.loop}'s event "
                  f"loop (callgrind; 200 and 1,200 calls, the difference over 1,000), "
                  f"Python {sys.version.split()[0]}")
            print(f"{'layer':42s} {'instructions/call':>18s}")
            for layer in LAYERS:
                count = instructions(server.url, server.port, layer, args.loop)
                print(f"{layer:42s} {count:18,.0f}", flush=True)
            return
        results = run_measure(server.url, server.port, args.rounds, args.calls, args.loop)
    print(f"one enqueue per call, layer by layer, on {args.loop}'s event loop: {args.calls} "
          f"calls x {args.rounds} rounds "
          f"(interleaved), Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}; medians of the rounds")
    print(f"{'layer':42s} {'client CPU us/call':>19s} {'calls/s':>9s}")
    for name, samples in results.items():
        cpu = statistics.median(s[0] for s in samples)
        rate = statistics.median(s[1] for s in samples)
        print(f"{name:42s} {cpu:19.1f} {rate:9,.0f}")


if __name__ == "__main__":
    main()

"""One enqueue per call: the async App against the sync SyncApp, on this
harness's own redis-server, in the same run (interleaved rounds, medians).
Also what SyncApp's lane (store/sync_lane.py: EVALSHA written and read on the
connection's socket) replaced, to show what each choice is worth: EVALSHA by
redis-py's send_command/read_response on a pooled connection (SyncApp before
the lane), and redis-py's own Script call.

Run: python benchmarks/sync_enqueue.py [N per round] [rounds]
     > benchmarks/results/sync_enqueue.txt
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from redis_server import RedisServer  # noqa: E402

from leasequeue import App, SyncApp  # noqa: E402
from leasequeue.store.keys import QueueKeys  # noqa: E402
from leasequeue.store.sync_scripts import SyncScripts, _run_on_pool  # noqa: E402
from leasequeue.store.translate import redis_errors  # noqa: E402

# per round: (jobs/s by the wall clock, client CPU us per enqueue); the CPU
# figure is the one a loaded machine disturbs least
Round = tuple[float, float]


def rate_sync(n: int, call: Callable[[int], object]) -> Round:
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        call(i)
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


async def rate_async(app: App, n: int) -> Round:
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        await app.enqueue("noop", {"i": i})
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n * 1e6


def _run_pooled(scripts: SyncScripts, name: str, qk: QueueKeys, args: Sequence[Any]) -> Any:
    """SyncScripts.run before the lane: EVALSHA by redis-py's send_command and
    read_response on a connection taken from the pool and given back."""
    keys = scripts._keys_of(name, qk)
    with redis_errors(scripts._url, name, keys):
        return _run_on_pool(scripts._redis, scripts._scripts[name], keys, args)[0]


async def run(url: str, n: int, rounds: int) -> dict[str, list[Round]]:
    # one event loop for the whole run: the async App's connections live in
    # it; the sync calls simply block it while they are measured
    app = App(url, prefix="bench-async")
    sync = SyncApp(url, prefix="bench-sync")
    pooled = SyncApp(url, prefix="bench-pooled")
    pooled_scripts: Any = pooled.scripts
    pooled_scripts.run = partial(_run_pooled, pooled.scripts)
    plain = SyncApp(url, prefix="bench-plain")
    plain.scripts._lane = None  # redis-py's own Script call, for comparison
    results: dict[str, list[Round]] = {"App (async)": [], "SyncApp": [],
                                       "SyncApp via redis-py send/read": [],
                                       "SyncApp via redis-py Script": []}
    try:
        await app.enqueue("noop", {"i": -1})
        for s in (sync, pooled, plain):
            s.enqueue("noop", {"i": -1})
        for _ in range(rounds):
            results["App (async)"].append(await rate_async(app, n))
            results["SyncApp"].append(rate_sync(n, lambda i: sync.enqueue("noop", {"i": i})))
            results["SyncApp via redis-py send/read"].append(
                rate_sync(n, lambda i: pooled.enqueue("noop", {"i": i})))
            results["SyncApp via redis-py Script"].append(
                rate_sync(n, lambda i: plain.enqueue("noop", {"i": i})))
    finally:
        for s in (sync, pooled, plain):
            s.close()
        await app.close()
    return results


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    with RedisServer() as server:
        results = anyio.run(run, server.url, n, rounds)
    print(f"one enqueue per call, {n} jobs x {rounds} rounds (interleaved), "
          f"Python {platform.python_version()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}")
    base = statistics.median(r for r, _ in results["App (async)"])
    base_cpu = statistics.median(c for _, c in results["App (async)"])
    for name, rounds_ in results.items():
        med = statistics.median(r for r, _ in rounds_)
        cpu = statistics.median(c for _, c in rounds_)
        print(f"{name:<31} median {med:6.0f} jobs/s ({med / base:.2f}x async), client CPU "
              f"{cpu:5.1f} us/enqueue ({cpu / base_cpu:.2f}x async); rounds jobs/s: "
              f"{', '.join(f'{r:.0f}' for r, _ in rounds_)}")


if __name__ == "__main__":
    main()

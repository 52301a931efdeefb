"""What calling an async run in a cancel scope costs the executor, per run:
the scope per run it used to enter and leave (anyio's asyncio CancelScope,
``with`` around the call) against the one scope an executor keeps across
runs (``handler.RunScopes``: entered once, checked after each run), beside
the bare await of a no-op coroutine. Each loop does what execute() does
around the call: points the run at the scope, awaits, clears it, reads the
outcome. Microseconds per run, on asyncio's loop (``--loop uvloop`` for
uvloop's), rounds of N runs each.

  python benchmarks/scope_cost.py [--rounds 3] [--n 200000] [--loop uvloop]"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from leasequeue.runtime.handler import RunScopes, _scope


class _Run:
    scope: Any = None


async def _noop() -> None:
    return None


async def _per_run(n: int) -> float:
    run = _Run()
    started = time.perf_counter()
    for _ in range(n):
        with _scope() as scope:
            run.scope = scope
            await _noop()
        run.scope = None
        if scope.cancelled_caught:
            raise AssertionError("not cancelled")
    return (time.perf_counter() - started) / n * 1e6


async def _shared(n: int) -> float:
    run = _Run()
    scopes = RunScopes()
    started = time.perf_counter()
    for _ in range(n):
        scope = scopes.enter()
        run.scope = scope
        await _noop()
        run.scope = None
        if scope.cancel_called:
            scopes.leave()
        else:
            scopes.check()
    elapsed = time.perf_counter() - started
    scopes.leave()
    return elapsed / n * 1e6


async def _bare(n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        await _noop()
    return (time.perf_counter() - started) / n * 1e6


async def _main(rounds: int, n: int) -> None:
    print("| round | scope per run µs | one scope per executor µs | bare await µs |")
    print("|---|---:|---:|---:|")
    for i in range(rounds):
        print(f"| {i + 1} | {await _per_run(n):.2f} | {await _shared(n):.2f} | "
              f"{await _bare(n):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = ap.parse_args()
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(_main(args.rounds, args.n))
    else:
        asyncio.run(_main(args.rounds, args.n))


if __name__ == "__main__":
    main()

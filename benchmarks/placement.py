"""One enqueue per call by where the client runs: on Redis's CPU or on the
other one. On a quiet 2-CPU VM this column moves between runs by more than
any client's own cost (bee-queue's one per call at 10,000 calls/s in one
harness run and 36,600 in the next), and the scheduler's placement is why:
a client that shares Redis's CPU hands it the CPU at each call, where one
on the other CPU wakes an idle CPU at each call, which on these VMs waits
for the hypervisor. This pins redis-server (this tool's own, on a free
port) to CPU 0 and each producer in turn to CPU 0 ("same CPU") or CPU 1
("other CPU"), alternating the producers and the placements, so that each
peer is measured in both and compared within each.

  python benchmarks/placement.py [--calls 5000] [--rounds 3] [--reps 3]
  python benchmarks/placement.py --what e2s [--reps 5]
  python benchmarks/placement.py --busy 0.5 [--calls 5000] [--rounds 3] [--reps 3]
  python benchmarks/placement.py --what timeline [--busy 0.5] [--reps 4]
  python benchmarks/placement.py client --url U --producer app-asyncio  (run by the tool)

``--what e2s``: the harness's enqueue→start probe (200 probes, the
harness's settings) of leasequeue (lq_bench.py) and bee-queue (node
bee.mjs), each bench process pinned as above with the worker it starts
(a child keeps its parent's CPU): all on Redis's CPU, or both clients on
the other one; p50 and p99 by placement, bee-queue ÷ ours (above 1: ours
is faster).

``--busy DUTY``: one enqueue per call beside a process busy DUTY of the
time (duty_load.py, as run.py --busy), pinned too: three processes on two
CPUs, so three placements, each peer measured in each: the client on
Redis's CPU and the load on the other ("client with Redis"), the load on
Redis's CPU and the client on the other ("Redis with the load"), and the
client with the load ("Redis apart").

``--what timeline``: nothing pinned, as in a harness run. Fresh processes
of App on asyncio's loop (with its reply spin, and without it) and of
bee-queue's one_call.mjs, in an order rotated each rep, none warmed up
(as the harness's bench processes), beside an unpinned process busy
``--busy`` of the time (0.5 when not given or 0: the timeline is of the
busy host), each making two rounds of ``calls`` calls; every 250 calls
the time per call is noted with the CPU that the client, redis-server
and the load last ran on (/proc/PID/stat; bee-queue's read as its
window's line comes), so that each window is classed by which two of the
three shared a CPU. Prints each process's windows, the median time per
call by placement and by round, and per process: whether its first
window ended with Redis beside the load, and the calls/s of its first
round (about the harness's figure) and of its second.

Needs 2 CPUs and the bee-queue install of benchmarks/node (run.py makes
it). Producers: bee-queue (benchmarks/node/one_call.mjs), leasequeue's App
on asyncio's loop and on uvloop's, SyncApp; each a process of its own,
warmed by 200 calls, then rounds of ``calls`` calls (calls/s per round)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duty_load
from common import cpu_model
from redis_server import RedisServer
from sched_trace import last_cpu

HERE = Path(__file__).resolve().parent
PLACEMENTS = {"same CPU": 0, "other CPU": 1}  # the client's CPU; Redis's is 0
# --busy: (the client's CPU, the load's CPU); Redis's is 0
BUSY_PLACEMENTS = {"client with Redis": (0, 1), "Redis with the load": (1, 0),
                   "Redis apart": (1, 1)}
PRODUCERS = ("bee-queue", "app-asyncio", "app-uvloop", "sync")
T = TypeVar("T")


WINDOW = 250  # --what timeline: calls a window
# --what timeline's producers of ours: the client's extra arguments
TIMELINE_OURS = {"leasequeue": [], "leasequeue, no spin": ["--no-spin"]}


def timeline_client(url: str, calls: int, rounds: int, pids: list[int], spin: bool) -> None:
    """--what timeline's fresh process: App on asyncio's loop, no warm-up,
    a JSON line per window of WINDOW calls (its round, µs a call, and the
    CPUs of this process, redis-server and the load at its end). Without
    ``spin``, its reply spin is off (StoreSettings(reply_spin_us=0))."""
    import leasequeue as lq
    from leasequeue.store.settings import StoreSettings

    async def windows() -> None:
        settings = None if spin else StoreSettings(reply_spin_us=0)
        app = lq.App(url, prefix="placement", settings=settings)
        app.job(lambda ctx: None, name="noop")
        for round_ in range(rounds):
            for _ in range(calls // WINDOW):
                t0 = time.perf_counter()
                for _ in range(WINDOW):
                    await app.enqueue("noop")
                us = (time.perf_counter() - t0) / WINDOW * 1e6
                cpus = [last_cpu(os.getpid()), *map(last_cpu, pids)]
                print(json.dumps({"round": round_, "us_per_call": us, "cpus": cpus}), flush=True)
        await app.close()

    asyncio.run(windows())


def placement_of(cpus: Sequence[int]) -> str:
    """A window's placement from the CPUs of (client, Redis, load)."""
    client_cpu, redis_cpu, load_cpu = cpus
    if client_cpu == redis_cpu:
        return "client with Redis" if load_cpu != redis_cpu else "all on one CPU"
    return "Redis with the load" if redis_cpu == load_cpu else "Redis apart"


def timeline_lines(producer: str, redis: RedisServer, calls: int,
                   pids: list[int]) -> list[dict[str, Any]]:
    """One fresh process's windows (round, us_per_call, cpus): ours reports
    its own; bee-queue's one_call.mjs a line per round of WINDOW calls,
    classed by the CPUs read here as each line comes."""
    per_round = calls // WINDOW
    if producer in TIMELINE_OURS:
        lines = process_lines(producer_argv(
            "timeline", redis, calls, 2,
            ["--pids", ",".join(map(str, pids)), *TIMELINE_OURS[producer]]), None)
    else:
        argv = producer_argv("bee-queue", redis, WINDOW, 2 * per_round, ["--warmup", "0"])
        lines = []
        with subprocess.Popen(argv, cwd=HERE / "node", stdout=subprocess.PIPE,
                              text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    cpus = [last_cpu(proc.pid), *map(last_cpu, pids)]
                    lines.append({"round": len(lines) // per_round, "cpus": cpus,
                                  "us_per_call": 1e6 / float(json.loads(line)["calls_per_s"])})
        if proc.returncode != 0:
            raise RuntimeError(f"bee-queue's one_call.mjs exited with {proc.returncode}")
    if len(lines) != 2 * per_round:  # every window of both rounds, or no figure
        raise RuntimeError(f"{producer}: {len(lines)} windows of {2 * per_round}")
    return lines


def timeline_main(busy: float, calls: int, reps: int) -> None:
    redis = RedisServer()
    redis.start()
    loads = duty_load.start(busy, 1)
    rows: dict[str, list[list[dict[str, Any]]]] = {}  # by producer: each process's windows
    try:
        assert redis.proc is not None
        pids = [redis.proc.pid, *(load.pid for load in loads)]
        for rep in range(reps):
            for producer in rotated(rep, [*TIMELINE_OURS, "bee-queue"]):
                lines = timeline_lines(producer, redis, calls, pids)
                for rnd in (0, 1):
                    mine = [x for x in lines if x["round"] == rnd]
                    print(f"{producer}, process {rep + 1}, round {rnd + 1}: µs a call per "
                          "window " + " ".join(f"{x['us_per_call']:.0f}" for x in mine)
                          + "; CPUs (client, Redis, load) "
                          + " ".join("".join(map(str, x["cpus"])) for x in mine))
                rows.setdefault(producer, []).append(lines)
                redis.flush()
    finally:
        duty_load.stop(loads)
        redis.stop()
    print(f"# one enqueue per call, fresh processes, nothing pinned, beside a process busy "
          f"{busy:.0%} of the time (duty_load.py); {reps} processes a producer (leasequeue's App "
          f"on asyncio's loop with its reply spin and without, bee-queue's one_call.mjs; none "
          f"warmed up, as the harness's bench processes), 2 rounds of {calls} calls each in "
          f"windows of {WINDOW}, each window classed by the CPUs the three last ran on at its "
          f"end; {cpu_model()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| producer | windows | count | µs a call (median) | calls/s at that median |")
    print("|---|---|---:|---:|---:|")
    for producer, processes in rows.items():
        groups: dict[str, list[float]] = {}
        for x in (x for lines in processes for x in lines):
            groups.setdefault(placement_of(x["cpus"]), []).append(x["us_per_call"])
            groups.setdefault(f"round {x['round'] + 1} (any placement)", []).append(
                x["us_per_call"])
        for name, values in sorted(groups.items()):
            med = statistics.median(values)
            print(f"| {producer} | {name} | {len(values)} | {med:.1f} | {1e6 / med:,.0f} |")
    print()
    print("| producer | processes whose first window ended with Redis beside the load | "
          "calls/s of a process's first round (about the harness's figure: the time between "
          "windows left out): median, lowest-highest | of its second round |")
    print("|---|---:|---:|---:|")
    for producer, processes in rows.items():
        began = sum(placement_of(lines[0]["cpus"]) == "Redis with the load"
                    for lines in processes)
        cells = []
        for rnd in (0, 1):
            rates = [1e6 / statistics.fmean(x["us_per_call"] for x in lines if x["round"] == rnd)
                     for lines in processes]
            cells.append(f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})")
        print(f"| {producer} | {began} of {len(processes)} | {cells[0]} | {cells[1]} |")


def client(url: str, producer: str, calls: int, rounds: int) -> None:
    """One producer's rounds, a JSON line each (run pinned by main())."""
    import leasequeue as lq

    def report(seconds: float) -> None:
        print(json.dumps({"producer": producer, "calls_per_s": calls / seconds}), flush=True)

    if producer == "sync":
        sync = lq.SyncApp(url, prefix="placement")
        for _ in range(200):
            sync.enqueue("noop")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                sync.enqueue("noop")
            report(time.perf_counter() - t0)
        sync.close()
        return

    async def rounds_of_app() -> None:
        app = lq.App(url, prefix="placement")
        app.job(lambda ctx: None, name="noop")
        for _ in range(200):
            await app.enqueue("noop")
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                await app.enqueue("noop")
            report(time.perf_counter() - t0)
        await app.close()

    if producer == "app-uvloop":
        import uvloop
        uvloop.run(rounds_of_app())
    else:
        asyncio.run(rounds_of_app())


def process_lines(argv: list[str], cpu: int | None,
                  cwd: Path | None = None) -> list[dict[str, Any]]:
    """``argv`` run on CPU ``cpu`` only (its children too; None: where the
    scheduler puts it): its JSON lines."""
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600,
                         check=True, preexec_fn=pin)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def alternated(rep: int, items: Sequence[T]) -> Sequence[T]:
    """``items`` in order on even reps, reversed on odd ones."""
    return items if rep % 2 == 0 else items[::-1]


def rotated(rep: int, items: list[T]) -> list[T]:
    """``items`` rotated by ``rep``: over len(items) reps each item comes
    first once (and, for three, follows each of the others once)."""
    k = rep % len(items)
    return items[k:] + items[:k]


def producer_argv(producer: str, redis: RedisServer, calls: int, rounds: int,
                  extra: Sequence[str] = ()) -> list[str]:
    if producer == "bee-queue":
        node = shutil.which("node") or "node"
        return [node, "one_call.mjs", "--port", str(redis.port), "--calls", str(calls),
                "--rounds", str(rounds), *extra]
    return [sys.executable, str(HERE / "placement.py"), "client", "--url", redis.url,
            "--producer", producer, "--calls", str(calls), "--rounds", str(rounds), *extra]


E2S_ARGS = ["--sections", "e2s", "--e2s-n", "200", "--e2s-budget", "2.0", "--e2s-min", "20"]


def e2s_pinned(peer: str, redis: RedisServer, cpu: int) -> dict[str, float]:
    """One bench process's e2s line (p50_ms, p99_ms), pinned with its worker."""
    if peer == "bee-queue":
        argv = [shutil.which("node") or "node", "bee.mjs", "bench", "--url", redis.url,
                *E2S_ARGS]
        cwd: Path | None = HERE / "node"
    else:
        argv = [sys.executable, str(HERE / "lq_bench.py"), "bench", "--url", redis.url,
                *E2S_ARGS]
        cwd = None
    for row in process_lines(argv, cpu, cwd):
        if row.get("metric") == "e2s" and "p50_ms" in row:
            return {"p50_ms": float(row["p50_ms"]), "p99_ms": float(row["p99_ms"])}
    raise RuntimeError(f"{peer}: no e2s figure (its stdout held no e2s line)")


def e2s_main(reps: int) -> None:
    redis = RedisServer()
    redis.start()
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        redis.pin({0})
        for rep in range(reps):
            for place, cpu in alternated(rep, list(PLACEMENTS.items())):
                for peer in alternated(rep, ["bee-queue", "leasequeue"]):
                    figures.setdefault((place, peer), []).append(e2s_pinned(peer, redis, cpu))
                    redis.flush()
    finally:
        redis.stop()
    print(f"# enqueue->start by placement: redis-server on CPU 0, each bench process (and the "
          f"worker it starts) on CPU 0 (same CPU) or 1 (other CPU); {reps} reps, 200 probes "
          f"each; medians of the reps' p50 and p99; {cpu_model()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| placement | bee-queue p50 / p99 (ms) | leasequeue p50 / p99 (ms) "
          "| bee-queue ÷ ours, p50 / p99 | per rep, p50 |")
    print("|---|---:|---:|---:|---|")
    for place in PLACEMENTS:
        bee, lq = figures[(place, "bee-queue")], figures[(place, "leasequeue")]
        b50, b99 = (statistics.median(f[k] for f in bee) for k in ("p50_ms", "p99_ms"))
        l50, l99 = (statistics.median(f[k] for f in lq) for k in ("p50_ms", "p99_ms"))
        per_rep = ", ".join(f"{b['p50_ms'] / m['p50_ms']:.2f}×"
                            for b, m in zip(bee, lq, strict=True))
        print(f"| {place} | {b50:.3f} / {b99:.3f} | {l50:.3f} / {l99:.3f} "
              f"| {b50 / l50:.2f}× / {b99 / l99:.2f}× | {per_rep} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", nargs="?", default="measure", choices=["measure", "client"])
    ap.add_argument("--url", default="")
    ap.add_argument("--producer", choices=(*PRODUCERS, "timeline"), default="sync")
    ap.add_argument("--pids", default="", help="(timeline's client: redis-server's, the load's)")
    ap.add_argument("--no-spin", action="store_true", help="(timeline's client: no reply spin)")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--what", choices=["one", "e2s", "timeline"], default="one",
                    help="one enqueue per call (default), enqueue->start, or one per call's "
                         "windows unpinned")
    ap.add_argument("--busy", type=float, default=0.0, metavar="DUTY",
                    help="beside a process busy DUTY (0-1) of the time: pinned as each "
                         "placement says; unpinned for --what timeline (0.5 by default there)")
    args = ap.parse_args()
    if args.no_spin and args.producer != "timeline":
        ap.error("--no-spin is the timeline client's")
    if args.role == "client":
        if args.producer == "timeline":
            timeline_client(args.url, args.calls, args.rounds,
                            [int(p) for p in args.pids.split(",")], not args.no_spin)
        else:
            client(args.url, args.producer, args.calls, args.rounds)
        return
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("placement.py needs two CPUs")
    if not 0 <= args.busy < 1:
        raise SystemExit("--busy is a share of the time: from 0 up to, not including, 1")
    if args.what == "e2s":
        e2s_main(args.reps)
    elif args.what == "timeline":
        timeline_main(args.busy or 0.5, args.calls, args.reps)
    else:
        one_main(args.busy, args.calls, args.rounds, args.reps)


def one_main(busy: float, calls: int, rounds: int, reps: int) -> None:
    """One enqueue per call by placement (quiet, or beside a pinned load)."""
    # where the client and the load run, by placement (no load: None)
    places: dict[str, tuple[int, int | None]] = (
        dict(BUSY_PLACEMENTS) if busy else
        {place: (cpu, None) for place, cpu in PLACEMENTS.items()})
    with RedisServer() as redis:
        redis.pin({0})
        rates: dict[tuple[str, str], list[float]] = {}
        for rep in range(reps):
            for place, (cpu, load_cpu) in alternated(rep, list(places.items())):
                loads = duty_load.start(busy, 1) if load_cpu is not None else []
                try:
                    for load in loads:
                        os.sched_setaffinity(load.pid, {load_cpu})
                    for producer in alternated(rep, PRODUCERS):
                        cwd = HERE / "node" if producer == "bee-queue" else None
                        lines = process_lines(
                            producer_argv(producer, redis, calls, rounds), cpu, cwd)
                        rates.setdefault((place, producer), []).extend(
                            float(line["calls_per_s"]) for line in lines)
                        redis.flush()
                finally:
                    duty_load.stop(loads)
    where = ("redis-server on CPU 0, the client on CPU 0 (same CPU) or 1 (other CPU)"
             if not busy else
             f"redis-server on CPU 0, beside a process busy {busy:.0%} of the time "
             "(duty_load.py), the client and the load each on CPU 0 or 1 as the placement says")
    print(f"# one enqueue per call by placement: {where}; {reps} reps x {rounds} "
          f"rounds of {calls} calls, medians; {cpu_model()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| placement | producer | calls/s (median) | lowest-highest | ÷ bee-queue |")
    print("|---|---|---:|---:|---:|")
    for place in places:
        bee = statistics.median(rates[(place, "bee-queue")])
        for producer in PRODUCERS:
            r = rates[(place, producer)]
            med = statistics.median(r)
            print(f"| {place} | {producer} | {med:,.0f} | {min(r):,.0f}-{max(r):,.0f} "
                  f"| {med / bee:.2f}× |")


if __name__ == "__main__":
    main()

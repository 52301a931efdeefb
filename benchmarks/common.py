"""Helpers shared by the leasequeue bench and every Python peer.

Stdlib plus redis-py only: this module is imported from the dev venv and
from each peer's own venv. A bench process reports on stdout, one JSON
object per line, so the orchestrator keeps what finished even when it has
to kill a process that hangs later on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

HERE = Path(__file__).resolve().parent
STAMPS = "bench:stamps"  # list the latency handlers push their start time to
RNG = random.Random(7)  # fixed seed: the same gaps between latency probes every run


# -- reporting ---------------------------------------------------------------

def emit(metric: str, **fields: Any) -> None:
    """One result line for the orchestrator."""
    print(json.dumps({"metric": metric, **fields}), flush=True)


def emit_error(metric: str, exc: BaseException) -> None:
    emit(metric, error=f"{type(exc).__name__}: {exc}"[:500])


def percentile(samples: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: p99.9 of 3000 samples is the
    3rd largest, a value that was really observed)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), int(-(-p * len(ordered) // 100))))
    return ordered[rank - 1]


def latency_summary(samples_ns: Sequence[int], ps: Sequence[float] = (50, 99)) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(samples_ns)}
    for p in ps:
        out[f"p{p:g}_ms"] = round(percentile(samples_ns, p) / 1e6, 4)
    return out


# -- arguments every bench process takes --------------------------------------

def bench_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["bench", "worker"], nargs="?", default="bench")
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=20_000, help="jobs to drain (and bulk-enqueue)")
    ap.add_argument("--one-n", type=int, default=5_000, help="jobs enqueued one per call")
    ap.add_argument("--one-budget", type=float, default=3.0, help="seconds cap for one-per-call")
    ap.add_argument("--e2s-n", type=int, default=300, help="latency probes")
    ap.add_argument("--e2s-budget", type=float, default=8.0, help="seconds cap for the probes")
    ap.add_argument("--e2s-min", type=int, default=1,
                    help="probes a slow worker may take up to 12 s to reach")
    ap.add_argument("--drain-budget", type=float, default=30.0, help="seconds cap for a drain")
    ap.add_argument("--conc-n", type=int, default=20_000,
                    help="jobs enqueued by CONC_TASKS concurrent tasks")
    ap.add_argument("--conc-budget", type=float, default=3.0,
                    help="seconds cap for the concurrent enqueue")
    ap.add_argument("--mem-n", type=int, default=100_000,
                    help="no-op jobs queued to measure used_memory per job")
    ap.add_argument("--sections", default="enqueue,drain,e2s")
    return ap.parse_args(argv)


def check_url(url: str) -> None:
    """The harness owns its Redis and flushes it; never the shared one on 6379."""
    port = urlparse(url).port
    if port in (None, 6379):
        raise SystemExit(f"refusing to run against {url}: the harness starts its own Redis")


def flush(url: str) -> None:
    import redis

    check_url(url)
    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


# -- worker subprocesses --------------------------------------------------------

def spawn(argv: Sequence[str], log_name: str, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a worker process in our process group (so the orchestrator's kill
    of the group takes it too); its output goes to results/tmp for post-mortems."""
    logs = HERE / "results" / "tmp"
    logs.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(HERE) + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    with open(logs / f"{log_name}.log", "ab") as log:
        return subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                cwd=str(cwd or HERE))


def run_in_tree(tree: Path, code: str) -> str:
    """Run ``code`` (a Python client script) in a process of its own that
    imports the leasequeue of source tree ``tree``; its stdout. The A/B
    micro-benchmarks (enqueue_cpu, gc_bulk, footprint) measure each tree so."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree,
                         capture_output=True, text=True)
    if out.returncode != 0:  # the child's own error, not only its exit status
        raise RuntimeError(f"the client of {tree} exited {out.returncode}:\n"
                           f"{out.stderr[-4000:]}")
    return out.stdout


T = TypeVar("T")


def tree_args(ap: argparse.ArgumentParser, rounds: int | None = None) -> None:
    """The A/B tools' arguments: ``--tree`` (repeat; args.tree holds the
    resolved paths) and, given a default, ``--rounds``."""
    ap.add_argument("--tree", action="append", required=True, type=lambda t: Path(t).resolve(),
                    help="a source tree (repeat)")
    if rounds is not None:
        ap.add_argument("--rounds", type=int, default=rounds)


def alternate(trees: Sequence[Path], rounds: int, measure: Callable[[Path], T],
              ) -> dict[Path, list[T]]:
    """``measure(tree)`` for each tree in turn, ``rounds`` times (A, B, A,
    B ...): the A/B tools' rounds, so that a drift of the host lands on every
    tree alike. Each tree's results, in round order."""
    rows: dict[Path, list[T]] = {tree: [] for tree in trees}
    for _ in range(rounds):
        for tree in trees:
            rows[tree].append(measure(tree))
    return rows


def last_json(out: str) -> Any:
    """The JSON of a child's last line of output (its result; lines before
    it are the child's own logging)."""
    return json.loads(out.strip().splitlines()[-1])


def stop(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def self_worker_argv(module: str, args: argparse.Namespace, *extra: str) -> list[str]:
    """The command that starts this same bench module in its worker role."""
    return [sys.executable, "-m", module, "worker", "--url", args.url, *extra]


# -- CPU use during a drain ----------------------------------------------------
# Where the time goes: the redis-server's CPU (INFO cpu) and the worker
# processes' CPU (/proc/<pid>/stat), sampled at the drain's first and last
# poll, as percent of one core over the measured window.

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def steal_seconds() -> float | None:
    """CPU seconds the hypervisor has taken from this VM's CPUs since boot
    (the steal column of /proc/stat's cpu line), None where it is not known:
    a host's other guests skew every figure, and a run can say how much."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def steal_share(before: float | None, after: float | None, seconds: float) -> float | None:
    """The share of the CPUs' time over ``seconds`` of wall time that the
    hypervisor took between two steal_seconds() reads."""
    if before is None or after is None or seconds <= 0:
        return None
    return max(0.0, after - before) / (seconds * (os.cpu_count() or 1))


def redis_cpu_seconds(client: Any) -> float:
    """The CPU seconds (user + system) a redis-server has used, from INFO cpu
    through a sync redis-py client."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def cpu_sampler(url: str, pids: Callable[[], Sequence[int]]) -> Callable[[], dict[str, float]]:
    import redis

    client = redis.Redis.from_url(url)

    def sample() -> dict[str, float]:
        return {"redis": redis_cpu_seconds(client), "workers": proc_cpu_seconds(pids())}

    return sample


def worker_tree(procs: Sequence[subprocess.Popen[bytes]]) -> list[int]:
    """The worker processes and their children (Celery, Dramatiq and taskiq
    fork their own), found by parent pid in /proc."""
    found = {p.pid for p in procs}
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    grew = True
    while grew:
        more = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return sorted(found)


def cpu_pct(before: dict[str, float], after: dict[str, float], seconds: float,
            jobs: int = 0) -> dict[str, float]:
    """CPU % of one core over the window, and the redis-server's CPU
    microseconds per job finished in it (INFO cpu user + sys delta ÷ jobs)."""
    out = {f"{k}_cpu_pct": round(100 * (after[k] - before[k]) / max(seconds, 1e-9), 1)
           for k in before}
    if jobs > 0 and "redis" in before:
        out["redis_us_per_job"] = round(1e6 * (after["redis"] - before["redis"]) / jobs, 2)
    return out


# -- drain ---------------------------------------------------------------------
# Jobs are enqueued first, then the workers are started. The clock starts at
# the first poll that sees fewer than n jobs left (so interpreter start-up and
# imports are not counted) and stops when none is left: rate = jobs finished
# between the two polls / time between them. "Left" counts jobs queued or
# running, so the last in-flight jobs are included.

POLL = 0.005


def drain_result(n: int, left_first: int, t_first: float, left_last: int, t_last: float,
                 complete: bool) -> dict[str, Any]:
    done = left_first - left_last
    seconds = max(t_last - t_first, 1e-9)
    return {"value": round(done / seconds, 1), "n": n, "measured_jobs": done,
            "seconds": round(seconds, 3), "complete": complete,
            "mono": [t_first, t_last]}  # (time.monotonic(): measure_drain's clock)


def measure_drain(left: Callable[[], int], n: int, budget: float,
                  alive: Callable[[], bool] = lambda: True,
                  sample: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + budget
    t_first, left_first = 0.0, n
    cpu0: dict[str, float] = {}
    while True:
        now_left = left()
        now = time.monotonic()
        if t_first == 0.0 and now_left < n:
            t_first, left_first = now, now_left
            cpu0 = sample() if sample else {}
        done = now_left == 0 and t_first
        if done or now > deadline or not alive():
            if not t_first:
                raise RuntimeError(f"no job finished within {budget:.0f} s"
                                   + ("" if alive() else " (worker exited)"))
            result = drain_result(n, left_first, t_first, now_left, now, bool(done))
            if sample:
                result.update(cpu_pct(cpu0, sample(), now - t_first,
                                      result["measured_jobs"]))
            return result
        time.sleep(POLL)


async def measure_drain_async(left: Callable[[], Awaitable[int]], n: int, budget: float,
                              sample: Callable[[], dict[str, float]] | None = None,
                              ) -> dict[str, Any]:
    import asyncio

    deadline = time.monotonic() + budget
    t_first, left_first = 0.0, n
    cpu0: dict[str, float] = {}
    while True:
        now_left = await left()
        now = time.monotonic()
        if t_first == 0.0 and now_left < n:
            t_first, left_first = now, now_left
            cpu0 = sample() if sample else {}
        done = now_left == 0 and t_first
        if done or now > deadline:
            if not t_first:
                raise RuntimeError(f"no job finished within {budget:.0f} s")
            result = drain_result(n, left_first, t_first, now_left, now, bool(done))
            if sample:
                result.update(cpu_pct(cpu0, sample(), now - t_first,
                                      result["measured_jobs"]))
            return result
        await asyncio.sleep(POLL)


# -- enqueue-to-start latency -------------------------------------------------
# One probe job at a time on an idle worker: take time.time_ns(), enqueue, and
# wait for the handler to push its own time.time_ns() (taken first thing in
# the handler) to STAMPS. A short random gap between probes keeps them from
# falling in step with a poller's period.

HARD_CAP = 12.0  # seconds a slow (polling) worker gets to reach --e2s-min probes


def gap(samples: Sequence[int]) -> float:
    """Seconds to wait before the next probe. A worker that polls would see
    probes sent right after its last poll (phase lock) and always show its
    full poll period; once a start was slow (> 20 ms: a poller) the gap is
    also drawn across the slowest start seen (about the poll period), so the
    probes land at random phases of the poll, as real arrivals do."""
    slowest = max(samples)
    extra = RNG.uniform(0.0, slowest / 1e9) if slowest > 20_000_000 else 0.0
    return RNG.uniform(0.002, 0.012) + extra


def more_probes(samples: Sequence[int], count: int, started: float, budget: float,
                min_n: int) -> bool:
    if len(samples) >= count:
        return False
    elapsed = time.monotonic() - started
    return elapsed < budget or (len(samples) < min_n and elapsed < HARD_CAP)


def slowlog_by_sha(client: Any) -> dict[str, list[int]]:
    """Redis's own time (µs, no I/O) of each EVALSHA call its SLOWLOG holds,
    by script sha (lower case), newest first. ``client`` is a sync redis-py
    client; the log holds every call only when slowlog-log-slower-than is 0
    and slowlog-max-len is above the calls made."""
    by_sha: dict[str, list[int]] = {}
    for entry in client.slowlog_get(100_000):
        words = entry["command"].split(b" ")
        if len(words) > 1 and words[0].upper().startswith(b"EVALSHA"):
            by_sha.setdefault(words[1].decode().lower(), []).append(int(entry["duration"]))
    return by_sha


def stamp_now(client: Any) -> None:
    """What every probe handler does (sync redis client)."""
    client.rpush(STAMPS, time.time_ns())


def e2s_result(samples: list[int], starts: list[float], started: float) -> dict[str, Any]:
    """The probes' figures; with their monotonic window, the producer's
    thread and each probe's (start, ns) for run.py's placement of the
    processes (sched_trace.py), probe by probe."""
    if not samples:
        raise RuntimeError("no probe job started")
    return {**latency_summary(samples), "mono": [started, time.monotonic()],
            "tid": threading.get_native_id(),
            "probes": [[round(t, 6), ns] for t, ns in zip(starts, samples, strict=True)]}


def measure_e2s(send: Callable[[], None], url: str, count: int, budget: float,
                min_n: int = 1) -> dict[str, Any]:
    import redis

    client = redis.Redis.from_url(url)
    client.delete(STAMPS)
    samples: list[int] = []
    starts: list[float] = []  # each probe's start on time.monotonic()'s clock
    started = time.monotonic()
    try:
        while more_probes(samples, count, started, budget, min_n):
            t0, mono = time.time_ns(), time.monotonic()
            send()
            got = client.blpop([STAMPS], timeout=max(2.0, budget))
            if got is None:
                break
            samples.append(int(got[1]) - t0)
            starts.append(mono)
            time.sleep(gap(samples))
    finally:
        client.close()
    return e2s_result(samples, starts, started)


async def measure_e2s_async(send: Callable[[], Awaitable[Any]], url: str, count: int,
                            budget: float, min_n: int = 1) -> dict[str, Any]:
    import asyncio

    import redis.asyncio as aredis

    client = aredis.Redis.from_url(url)
    await client.delete(STAMPS)
    samples: list[int] = []
    starts: list[float] = []  # each probe's start on time.monotonic()'s clock
    started = time.monotonic()
    try:
        while more_probes(samples, count, started, budget, min_n):
            t0, mono = time.time_ns(), time.monotonic()
            await send()
            got = await client.blpop([STAMPS], timeout=max(2.0, budget))
            if got is None:
                break
            samples.append(int(got[1]) - t0)
            starts.append(mono)
            await asyncio.sleep(gap(samples))
    finally:
        await client.aclose()
    return e2s_result(samples, starts, started)


# -- concurrent enqueue and memory per queued job ---------------------------------

CONC_TASKS = 100  # concurrent producers, as the tasks of a web service


def stubbed_app(prefix: str) -> Any:
    """A leasequeue App whose enqueues never reach Redis (never connected):
    its queue "default" taken as checked, its coalescer's script call
    answering every job "queued" after one turn of the loop. What
    concurrent_instructions.py and process_spread.py measure: the client's
    own work of App.enqueue (the call, the job, the coalescer's batch, ids
    and answers, parking and waking the caller), with no arguments
    formatted and no I/O. Imports leasequeue only when called (the peers'
    bench processes import this module too)."""
    from leasequeue import App

    app = App("redis://127.0.0.1:1/0", prefix=prefix)
    app._verified.add("default")
    app.coalescer._send = answer_queued
    return app


async def answer_queued(qk: Any, jobs: Sequence[Any], ids: Any) -> list[tuple[bool, str]]:
    """A stubbed enqueue script call (a coalescer's send): every job
    "queued", after one turn of the loop, with no arguments formatted and
    no I/O."""
    import asyncio

    await asyncio.sleep(0)
    return [(True, "queued")] * len(jobs)


async def concurrent_enqueue(enqueue: Callable[[], Awaitable[Any]], n: int,
                             budget: float, tasks: int = CONC_TASKS) -> dict[str, Any]:
    """``tasks`` asyncio tasks, each awaiting one enqueue call at a time in a
    loop, until ``n`` jobs are in or ``budget`` seconds passed: jobs/s."""
    import asyncio

    done = 0
    started = time.perf_counter()
    deadline = started + budget

    async def loop() -> None:
        nonlocal done
        while done < n and time.perf_counter() < deadline:
            done += 1  # claimed before the await: the total never passes n
            await enqueue()

    await asyncio.gather(*(loop() for _ in range(tasks)))
    return {**timed_rate(done, time.perf_counter() - started), "tasks": tasks}


def used_memory(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def memory_line(before: int, after: int, n: int) -> dict[str, Any]:
    """used_memory bytes per queued job, from INFO memory before and after."""
    return {"value": round((after - before) / n, 1), "n": n, "used_memory_before": before,
            "used_memory_after": after}


def timed_rate(count: int, seconds: float) -> dict[str, Any]:
    """A rate measured over the ``seconds`` that end now; ``mono``: that
    window on time.monotonic()'s clock, over which run.py places the
    section's processes (sched_trace.py)."""
    now = time.monotonic()
    return {"value": round(count / max(seconds, 1e-9), 1), "n": count,
            "seconds": round(seconds, 3), "mono": [now - seconds, now],
            "tid": threading.get_native_id()}  # the thread that measured it: the client


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), as run.py's report records it:
    figures are of a kind of host (benchmarks/standing.py --by host)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"

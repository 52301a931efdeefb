"""The whole benchmark in one command.

  python benchmarks/run.py            full: 3 repetitions, claim latency up
                                      to 1M ready jobs (about 9-10 minutes)
  python benchmarks/run.py --quick    1 repetition, small sizes (< 60 s)

Starts its own redis-server on a free loopback port (no persistence),
installs the peers (once: each into benchmarks/.venvs/<peer>, BullMQ and bee-queue for Node
into benchmarks/node), runs every bench as a subprocess with a time limit,
and writes benchmarks/results/results.{json,md,png}. Run it with the dev
venv's Python (leasequeue importable).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import common  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)
import duty_load  # noqa: E402
import envs  # noqa: E402
import report  # noqa: E402
import sched_trace  # noqa: E402
from common import cpu_model  # noqa: E402
from redis_server import RedisServer  # noqa: E402

RESULTS = HERE / "results"
TMP = RESULTS / "tmp"


@dataclass(frozen=True)
class Mode:
    """Sizes and time budgets of one mode; every loop below is bounded by them."""

    name: str
    reps: int
    claim_sizes: tuple[int, ...]
    claim_samples: int
    n: int  # jobs drained and bulk-enqueued
    one_n: int
    one_budget: float
    e2s_n: int
    e2s_budget: float
    e2s_min: int  # probes a polling worker may take up to 12 s to reach
    lq_drain_budget: float
    peer_drain_budget: float
    ceiling_quick: bool
    conc_n: int  # jobs enqueued by 100 concurrent tasks
    conc_budget: float
    mem_n: int  # no-op jobs queued to measure used_memory per job


FULL = Mode("full", 3, (1_000, 100_000, 1_000_000), 1_500, 20_000, 5_000, 1.5, 200, 2.0, 20,
            30.0, 5.0, False, 20_000, 3.0, 100_000)
QUICK = Mode("quick", 1, (1_000, 100_000), 300, 2_000, 500, 0.3, 30, 1.0, 3, 5.0, 2.0, True,
             2_000, 0.5, 100_000)


@dataclass(frozen=True)
class PeerSpec:
    name: str  # as in envs.PIP_PEERS, or a Node peer (envs.NODE_PEERS)
    module: str  # python -m module, or the .mjs file for node


PEERS = [
    PeerSpec("arq", "peers.arq_peer"),
    PeerSpec("saq", "peers.saq_peer"),
    PeerSpec("rq", "peers.rq_peer"),
    PeerSpec("dramatiq", "peers.dramatiq_peer"),
    PeerSpec("celery", "peers.celery_peer"),
    PeerSpec("taskiq", "peers.taskiq_peer"),
    PeerSpec("bullmq-py", "peers.bullmq_py_peer"),
    PeerSpec("bullmq-node", "node/bench.mjs"),
    PeerSpec("bee-queue-node", "node/bee.mjs"),
]


CLIENT_CPUS: set[int] | None = None  # --pin: every bench process on these CPUs
# where each bench's processes ran (sched_trace.py): the kernel's events, and
# redis-server's pid (None: --no-placement, or tracefs not writable here)
TRACE: sched_trace.SchedTrace | None = None
REDIS_PID = 0
LOAD_PID = 0  # --busy: the duty load's process (placed too: is Redis beside it?)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_lines(argv: list[str], timeout: float,
              name: str) -> tuple[list[dict[str, Any]], str | None]:
    """Run one bench process in its own session; on timeout kill the whole
    group (its worker processes too) and keep the lines it had printed. Each
    measured section's line (one with its ``mono`` window) gets where its
    processes ran over that window (placed()), unless --no-placement."""
    TMP.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("BENCH_URL", None)
    cpus = CLIENT_CPUS  # (run.py --pin: the clients' CPUs, their workers' too)
    known = trace_begin(name)
    stolen, began = common.steal_seconds(), time.monotonic()
    with open(TMP / f"{name}.stderr", "wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=HERE, env=env,
                                start_new_session=True,
                                preexec_fn=None if cpus is None
                                else lambda: os.sched_setaffinity(0, cpus))
        error = None
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            error = f"killed after its {timeout:.0f} s time limit"
        finally:
            try:  # leftovers of a process that exited but left workers behind
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    placement = trace_end(name, proc.pid, known)
    # the hypervisor's share of the CPUs over the whole bench process (two reads
    # of /proc/stat: nothing wakes in between)
    steal = steal_over(stolen, time.monotonic() - began)
    lines = []
    for raw in out.decode(errors="replace").splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue
        if isinstance(item, dict) and "metric" in item:
            if placement is not None:
                place_line(name, placement, item)
            if steal is not None:
                item["steal_pct"] = steal
            lines.append(item)
    if error is None and proc.returncode != 0:
        tail = (TMP / f"{name}.stderr").read_text(errors="replace").strip().splitlines()[-3:]
        error = f"exit {proc.returncode}: " + " | ".join(tail)[-400:]
    return lines, error


def trace_begin(name: str) -> dict[int, tuple[float, int]] | None:
    """Recording started for a bench process: the tasks already running
    that placed() needs (redis-server, the load), when and where /proc saw
    them. None: no placement for this bench (none asked, or it failed)."""
    if TRACE is None:
        return None
    try:
        return TRACE.begin(filter(None, (REDIS_PID, LOAD_PID)))
    except (OSError, ValueError, IndexError) as exc:
        log(f"{name}: no placement: {exc}")
        with contextlib.suppress(OSError):
            TRACE.stop()
        return None


def trace_end(name: str, leader: int,
              known: dict[int, tuple[float, int]] | None) -> sched_trace.Placement | None:
    """Recording stopped: what the bench's events say (None on failure)."""
    if TRACE is None or known is None:
        return None
    try:
        return sched_trace.parse(TRACE.end(), leader, known)
    except (OSError, RuntimeError, KeyError, ValueError, IndexError) as exc:
        log(f"{name}: no placement: {exc}")
        return None


def place_line(name: str, placement: sched_trace.Placement, item: dict[str, Any]) -> None:
    """A line's ``placement``, where it has a window (a bad line loses only
    its own, with a note in the log)."""
    try:
        where = placed(placement, item)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        log(f"{name}: {item['metric']}: no placement: {exc!r}")
        return
    if where is not None:
        item["placement"] = where


def placed(placement: sched_trace.Placement, item: dict[str, Any]) -> dict[str, Any] | None:
    """Where a line's processes ran over its ``mono`` window (common.timed_rate,
    drain_result and the e2s probes, node/common.mjs alike; None without
    one): per pair of the client (the thread the line names as ``tid``), the
    worker (the process the bench started that was alive longest in the
    window, if any), redis-server's main thread and, with --busy, the duty
    load's process, the share of the window in which the two were assigned
    to one CPU."""
    mono = item.get("mono")
    if not (isinstance(mono, list) and len(mono) == 2):
        return None
    t0, t1 = float(mono[0]), float(mono[1])
    tasks = {"redis": REDIS_PID}
    if item.get("tid"):  # (a drain's line names none: its measuring thread is no client)
        tasks["client"] = int(item["tid"])
    worker = placement.worker(t0, t1)
    if worker is not None:
        tasks["worker"] = worker
    if LOAD_PID:
        tasks["load"] = LOAD_PID
    out: dict[str, Any] = {}
    for x, y in (("client", "redis"), ("worker", "redis"), ("client", "worker"),
                 ("redis", "load"), ("client", "load")):
        if x in tasks and y in tasks:
            out[f"{x}_with_{y}"] = placement.share(tasks[x], tasks[y], t0, t1)
    if "client" in tasks and "worker" in tasks and isinstance(item.get("probes"), list):
        out["probes"] = by_placement(placement, tasks, item["probes"])
    return out


def by_placement(placement: sched_trace.Placement, tasks: dict[str, int],
                 probes: list[list[float]]) -> dict[str, Any]:
    """The enqueue->start probes by where their three processes were as the
    handler started (Placement.probe): ``where``, one entry per probe (in the
    order of the line's ``probes``; report.probe_groups makes their counts
    and p50s), and per place how many probes saw each process change CPU
    during the probe."""
    where: list[str] = []
    moves: dict[str, dict[str, int]] = {}
    for start, ns in probes:
        place, moved = placement.probe(tasks["client"], tasks["worker"], tasks["redis"],
                                       start, start + ns / 1e9)
        where.append(place)
        counts = moves.setdefault(place, {})
        for name in moved:
            counts[name] = counts.get(name, 0) + 1
    return {"where": where, "moved": moves}


def bench_flags(mode: Mode, url: str, drain_budget: float) -> list[str]:
    return ["--url", url, "--n", str(mode.n), "--one-n", str(mode.one_n), "--one-budget",
            str(mode.one_budget), "--e2s-n", str(mode.e2s_n), "--e2s-budget",
            str(mode.e2s_budget), "--e2s-min", str(mode.e2s_min), "--drain-budget",
            str(drain_budget), "--conc-n", str(mode.conc_n), "--conc-budget",
            str(mode.conc_budget), "--mem-n", str(mode.mem_n)]


def rep_timeout(mode: Mode, drain_budget: float, drains: int = 1) -> float:
    """A generous bound: budgets plus fills, start-ups and a margin."""
    return (2 * (mode.one_budget + mode.conc_budget + drains * drain_budget + mode.e2s_budget)
            + 60 + mode.mem_n / 5_000)


def run_ceiling(server: RedisServer, mode: Mode, out: dict[str, Any]) -> None:
    for rep in range(mode.reps):
        argv = [sys.executable, str(HERE / "ceiling.py"), "--port", str(server.port)]
        if mode.ceiling_quick:
            argv.append("--quick")
        lines, error = run_lines(argv, 120, f"ceiling-{rep}")
        out.setdefault("runs", []).append({"rep": rep, "lines": lines, "error": error})
        log(f"ceiling rep {rep + 1}: " + ", ".join(
            f"{x['metric']}={x.get('value', x.get('error'))}" for x in lines))


def run_lq_claim(server: RedisServer, mode: Mode, out: dict[str, Any]) -> None:
    server.flush()
    sizes = ",".join(str(s) for s in mode.claim_sizes)
    argv = [sys.executable, str(HERE / "lq_bench.py"), "claim", "--url", server.url,
            "--sizes", sizes, "--samples", str(mode.claim_samples), "--reps", str(mode.reps)]
    # fill at ~35k jobs/s, then each sample is a claim + an untimed ack and refill
    limit = (60 + sum(mode.claim_sizes) / 20_000
             + mode.reps * len(mode.claim_sizes) * mode.claim_samples * 0.006)
    lines, error = run_lines(argv, limit, "lq-claim")
    out["claim"] = {"lines": lines, "error": error}
    log(f"leasequeue claim latency: {len(lines)} lines" + (f", ERROR {error}" if error else ""))
    server.flush()


def run_lq_rep(server: RedisServer, mode: Mode, out: dict[str, Any], rep: int) -> None:
    argv = [sys.executable, str(HERE / "lq_bench.py"), "bench",
            *bench_flags(mode, server.url, mode.lq_drain_budget)]
    lines, error = run_lines(argv, rep_timeout(mode, mode.lq_drain_budget, 6), f"lq-{rep}")
    out.setdefault("runs", []).append({"rep": rep, "lines": lines, "error": error})
    log(f"leasequeue rep {rep + 1}: " + _brief(lines) + (f" ERROR {error}" if error else ""))
    server.flush()


def _brief(lines: list[dict[str, Any]]) -> str:
    parts = []
    for x in lines:
        if x["metric"] == "info":
            continue
        v = x.get("value", x.get("p50_ms"))
        parts.append(f"{x['metric']}={v if 'error' not in x else 'ERR'}")
    return ", ".join(parts)


def peer_ready(spec: PeerSpec, status: envs.EnvStatus, out: dict[str, Any]) -> bool:
    out["install_seconds"] = round(status.seconds, 1)
    if status.error is not None or status.python is None:
        out["error"] = f"not installed: {status.error}"
        log(f"{spec.name}: {out['error']}")
        return False
    return True


def run_peer_rep(spec: PeerSpec, status: envs.EnvStatus, server: RedisServer, mode: Mode,
                 out: dict[str, Any], rep: int) -> None:
    assert status.python is not None
    server.flush()
    if spec.name in envs.NODE_PEERS:
        argv = [status.python, str(HERE / spec.module), "bench"]
    else:
        argv = [status.python, "-m", spec.module, "bench"]
    argv += bench_flags(mode, server.url, mode.peer_drain_budget)
    # the Node peers drain twice (concurrency 100, then 1: node/common.mjs)
    drains = 2 if spec.name in envs.NODE_PEERS else 1
    lines, error = run_lines(argv, rep_timeout(mode, mode.peer_drain_budget, drains),
                             f"{spec.name}-{rep}")
    out.setdefault("runs", []).append({"rep": rep, "lines": lines, "error": error})
    log(f"{spec.name} rep {rep + 1}: " + _brief(lines) + (f" ERROR {error}" if error else ""))
    server.flush()


def install(selected: list[PeerSpec]) -> dict[str, envs.EnvStatus]:
    statuses: dict[str, envs.EnvStatus] = {}
    for spec in selected:
        if spec.name in envs.NODE_PEERS:
            statuses[spec.name] = envs.ensure_node(spec.name)
        else:
            statuses[spec.name] = envs.ensure_pip_env(spec.name)
        s = statuses[spec.name]
        log(f"install {spec.name}: " + ("ok" if s.error is None else f"FAILED {s.error}")
            + (f" ({s.seconds:.0f} s)" if s.seconds else " (cached)"))
    return statuses


def machine() -> dict[str, Any]:
    cpu = cpu_model()
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "memory": mem,
            "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(),
            # other work on the machine skews every figure: say how busy it was
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
            "steal_s_start": common.steal_seconds()}


def code_fingerprint() -> str:
    """A hash of leasequeue/*.py and lua/*.lua as they are now: taken at the
    start and the end, it tells whether the package was edited mid-run (the
    workers import it afresh for every section)."""
    digest = hashlib.sha1()
    for path in sorted([*(HERE.parent / "leasequeue").rglob("*.py"),
                        *(HERE.parent / "lua").glob("*.lua")]):
        digest.update(str(path.relative_to(HERE.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


CLIENT_LIBRARIES = (("redis", "redis-py"), ("hiredis", "hiredis"), ("anyio", "anyio"),
                    ("msgpack", "msgpack"), ("uvloop", "uvloop"))


def client_versions() -> dict[str, str]:
    """The client libraries leasequeue's figures run on, as installed: its
    direct path drives redis-py's connections (store/direct.py), so a run
    names the redis-py it measured."""
    out = {}
    for dist, label in CLIENT_LIBRARIES:
        try:
            out[label] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[label] = "absent"
    return out


def git_state() -> str:
    """The commit measured, and whether the work tree differed from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "../leasequeue",
                                "../lua"], cwd=HERE, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + (" + uncommitted changes in leasequeue/ or lua/" if dirty else "")


def prepare_host(server: RedisServer, pinned: bool, busy: float) -> list[Any]:
    """--pin and --busy: the CPUs pinned, the background load started (its
    processes, for duty_load.stop)."""
    if pinned:
        pin(server)
    global LOAD_PID
    loads = duty_load.start(busy, 1)
    if loads:
        log(f"beside a process busy {busy:.0%} of the time (duty_load.py)")
        LOAD_PID = loads[0].pid  # placed too (placed(): is Redis beside it?)
    return loads


def steal_over(start: float | None, seconds: float) -> float | None:
    """The hypervisor's share of the CPUs (%) over the ``seconds`` since the
    steal_seconds() read ``start`` (a bench process's, or the whole run's)."""
    share = common.steal_share(start, common.steal_seconds(), seconds)
    return None if share is None else round(100 * share, 2)


def tracefs_hint() -> str:
    """Why a tracefs instance could not be made, as far as can be told."""
    if os.geteuid() != 0:
        return "not root"
    if not sched_trace.tracefs_mounted():
        if not sched_trace.TRACEFS.is_dir():
            return f"no {sched_trace.TRACEFS} to mount tracefs on"
        # (open_trace tried mount_tracefs first)
        return (f"tracefs is not mounted at {sched_trace.TRACEFS}, and "
                f"'mount -t tracefs nodev {sched_trace.TRACEFS}' was refused")
    return "root, tracefs mounted: the kernel refused the instance"


def open_trace(server: RedisServer, wanted: bool) -> bool:
    """Where each bench's processes run, recorded from now on (sched_trace.py)
    if ``wanted``: False where the tracefs instance cannot be made (not root,
    no tracefs)."""
    global TRACE, REDIS_PID
    assert server.proc is not None
    if not wanted:
        return False
    if sched_trace.mount_tracefs():
        log(f"mounted tracefs at {sched_trace.TRACEFS} (it was not): placement recorded")
    trace = sched_trace.SchedTrace()
    if not trace.open():
        log(f"no placement: the tracefs instance could not be made ({tracefs_hint()})")
        return False
    TRACE, REDIS_PID = trace, server.proc.pid
    return True


def close_trace() -> None:
    """The tracefs instance removed (at the end, or on the way out)."""
    global TRACE
    if TRACE is not None:
        TRACE.close()
        TRACE = None


def pin(server: RedisServer) -> None:
    """run.py --pin: redis-server on CPU 0, every bench process started from
    now on (and its workers) on the other CPUs."""
    global CLIENT_CPUS
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2 or 0 not in cpus:
        raise SystemExit("--pin needs CPU 0 and at least one other")
    CLIENT_CPUS = cpus - {0}
    server.pin({0})
    log(f"pinned: redis-server on CPU 0, the clients on {sorted(CLIENT_CPUS)}")


def run_all(server: RedisServer, mode: Mode, selected: list[PeerSpec],
            statuses: dict[str, envs.EnvStatus], results: dict[str, Any]) -> None:
    """Every bench of the run, into ``results``."""
    run_ceiling(server, mode, results["ceiling"])
    run_lq_claim(server, mode, results["leasequeue"])
    ready = []
    for spec in selected:
        results["peers"][spec.name] = {}
        if peer_ready(spec, statuses[spec.name], results["peers"][spec.name]):
            ready.append(spec)
    # interleaved: each repetition runs every queue once, so that the
    # machine's drift (these shared machines move within minutes) falls on
    # all of them alike, not on whichever queue ran last
    for rep in range(mode.reps):
        run_lq_rep(server, mode, results["leasequeue"], rep)
        for spec in ready:
            run_peer_rep(spec, statuses[spec.name], server, mode,
                         results["peers"][spec.name], rep)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 repetition, small sizes (< 60 s)")
    ap.add_argument("--peers", default=",".join(p.name for p in PEERS),
                    help="comma-separated subset of peers ('' for none)")
    ap.add_argument("--out", default=str(RESULTS), help="folder for results.{json,md,png}")
    ap.add_argument("--replace", action="store_true",
                    help="write over a run kept in --out (the default folder is always replaced)")
    ap.add_argument("--busy", type=float, default=0.0, metavar="DUTY",
                    help="run beside a process busy DUTY (0-1) of the time, as a busy host's "
                         "other work (duty_load.py; README, 'On a busy host')")
    ap.add_argument("--pin", action="store_true",
                    help="redis-server on CPU 0, every client (and its workers) on the "
                         "others: the scheduler's placement out of the figures "
                         "(placement.py; README, 'Where it is behind')")
    ap.add_argument("--no-placement", action="store_true",
                    help="no record of where each process ran (sched_trace.py: the "
                         "kernel's scheduler events, through a tracefs instance)")
    args = ap.parse_args()
    if not 0 <= args.busy < 1:
        raise SystemExit("--busy is a share of the time: from 0 up to, not including, 1")
    if (Path(args.out).resolve() != RESULTS.resolve() and (Path(args.out) / "results.json").exists()
            and not args.replace):
        # a named folder holds a run the README or the history may cite
        # (one was written over by a later run of the same name, 2026-12-04)
        raise SystemExit(f"{args.out} holds a run already: choose another --out, or --replace")
    mode = QUICK if args.quick else FULL
    wanted = [x for x in args.peers.split(",") if x]
    unknown = set(wanted) - {p.name for p in PEERS}
    if unknown:
        raise SystemExit(f"unknown peers: {', '.join(sorted(unknown))}")
    selected = [p for p in PEERS if p.name in wanted]
    try:
        import leasequeue
    except ImportError:
        raise SystemExit("leasequeue is not importable: run this with the dev venv's "
                         "python (pip install -e . first)") from None

    started = time.monotonic()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "mode": mode.name,
        "settings": mode.__dict__ | {"claim_sizes": list(mode.claim_sizes)},
        "machine": machine(),
        "versions": {"leasequeue": leasequeue.__version__, **client_versions()},
        "git": git_state(), "code_fingerprint_start": code_fingerprint(),
        "busy": args.busy, "pinned": args.pin, "placement_recorded": False,
        "ceiling": {}, "leasequeue": {}, "peers": {},
    }
    statuses = install(selected)
    plot_env = envs.ensure_pip_env("plot")  # matplotlib, for the PNG at the end
    log("install plot (matplotlib): " + ("ok" if plot_env.error is None else
                                         f"FAILED {plot_env.error}"))
    results["install_seconds"] = round(time.monotonic() - started, 1)
    server = RedisServer()
    server.start()
    log(f"redis-server {server.version()} on {server.url} (no persistence)")
    results["versions"]["redis"] = server.version()
    loads: list[Any] = []
    # a SIGTERM unwinds through the finally below (the trace instance removed)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        results["placement_recorded"] = open_trace(server, not args.no_placement)
        loads = prepare_host(server, args.pin, args.busy)
        run_all(server, mode, selected, statuses, results)
    finally:
        close_trace()
        duty_load.stop(loads)
        server.stop()
    results["code_fingerprint_end"] = code_fingerprint()
    if results["code_fingerprint_end"] != results["code_fingerprint_start"]:
        log("WARNING: leasequeue/ or lua/ changed during the run; figures may mix versions")
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    results["bench_seconds"] = round(time.monotonic() - started - results["install_seconds"], 1)
    results["machine"]["steal_pct"] = steal_over(results["machine"].get("steal_s_start"),
                                                 time.monotonic() - started)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = report.summarize(results)
    results["summary"] = summary
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "results.md").write_text(report.markdown(results))
    plot_error = draw_plot(statuses, out_dir)
    if plot_error:
        log(f"plot: {plot_error}")
    log(f"done in {time.monotonic() - started:.0f} s "
        f"(install {results['install_seconds']:.0f} s): {out_dir / 'results.md'}")


def draw_plot(statuses: dict[str, envs.EnvStatus], out_dir: Path) -> str | None:
    """matplotlib lives in the 'plot' venv, not in the dev venv."""
    status = envs.ensure_pip_env("plot")
    if status.python is None:
        return f"matplotlib not installed: {status.error}"
    proc = subprocess.run([status.python, str(HERE / "plot.py"), str(out_dir / "results.json"),
                           str(out_dir / "results.png")], capture_output=True, text=True,
                          timeout=120)
    return None if proc.returncode == 0 else proc.stderr[-500:]


if __name__ == "__main__":
    main()

"""Where leasequeue stands against its best peer over many runs, not one:
every Node-peer run's results.json (benchmarks/run.py --peers
bullmq-node,bee-queue-node) read again, each column's lq ÷ best peer
(report.best_ratios, the figure each run's report prints) gathered per
day, and how many runs met issue 11's target. One day's three runs say
little on these shared hosts: Node and Python do not move alike with the
host's speed (bee-queue's bulk rose 1.4-1.5x between two days, ours
1.0-1.25x), so a band over days is the fairer standing. The hosts differ
too (an AMD EPYC one, an Intel Xeon one, a run's "machine" in its
results.json): --by host bands the same runs per kind of host instead of
per day. One CPU's name holds hosts whose wake-ups cost several times
more than others' (two AMD EPYC hosts of 2026-12-07): --by trip bands them
also by one client's round trip, from the run's own redis-py ceiling
(evalsha_c1, back to back: mostly wake-ups on these VMs); --by floor
bands them by the client's own speed instead, from the run's park-and-wake
floor on asyncio's loop (concurrent_floor_bare): what the 100 tasks
follow, where the round trip does not. A run beside a
background load (run.py --busy) or pinned to CPUs (run.py --pin) is left
out: the band is the quiet host's, its processes placed by its scheduler.

  python benchmarks/standing.py                      # every node_peers_* run
  python benchmarks/standing.py --since 2026-12-03   # the runs from that day on
  python benchmarks/standing.py --by host            # banded per kind of host
  python benchmarks/standing.py --by trip            # ... and its round trip's band
  python benchmarks/standing.py --by floor           # ... and its client's speed
  python benchmarks/standing.py DIR ...              # these result directories
  python benchmarks/standing.py --placement          # by where the processes ran
  python benchmarks/standing.py --placement --busy DIR ...   # the same beside a load
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import (
    BEST_COLUMNS,
    FLOORS,
    PLACES,
    TASKS_TARGET,
    FloorRow,
    best_ratios,
    floor_rows,
    placement_recorded,
    probe_cells,
    probe_groups,
)

RESULTS = Path(__file__).resolve().parent / "results"
NODE_PEERS = ("bullmq-node", "bee-queue-node")
# issue 11's target per column: lq ÷ the best peer in the same run
TARGETS = {
    "drain, concurrency 100 (jobs/s)": 2.0,
    "enqueue, 100 concurrent tasks (jobs/s)": TASKS_TARGET,
    "enqueue, 100 concurrent tasks, App on uvloop (jobs/s)": TASKS_TARGET,
    "enqueue, bulk (jobs/s)": 2.0,
}


def load(dirs: list[Path], busy: bool = False) -> list[dict[str, Any]]:
    """The runs of ``dirs`` against both Node peers, each results.json once,
    oldest first (``busy``: only the runs beside a load, run.py --busy)."""
    runs = []
    for d in dirs:
        path = d / "results.json"
        if not path.is_file():
            continue
        results = json.loads(path.read_text())
        if bool(results.get("busy")) != busy or results.get("pinned"):  # run.py --busy /
            continue  # --pin: other conditions than this band's (a quiet host, its placement)
        peers = results.get("summary", {}).get("peers", {})
        if all(peers.get(p, {}).get("version") for p in NODE_PEERS):
            results["_dir"] = d.name
            runs.append(results)
    return sorted(runs, key=lambda r: r["date"])


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def host(run: dict[str, Any]) -> str:
    """The kind of host a run had: its CPU's vendor and family ("AMD EPYC",
    "Intel Xeon"), from the model name the harness recorded."""
    cpu = str(run.get("machine", {}).get("cpu", "?"))
    words = cpu.replace("(R)", "").replace("(TM)", "").split()
    return " ".join(words[:2]) or "?"


# one client's EVALSHA round trip, back to back (the run's own redis-py
# ceiling, evalsha_c1: every run has it), in these bands: what a host's
# wake-ups cost, which one CPU's name does not say (the AMD EPYC hosts of
# 2026-12-07 01:27-02:48 and of 05:00-05:53 were 6-9k and 15-19k a second)
TRIP_BANDS_US = (40.0, 90.0)


def round_trip_us(run: dict[str, Any]) -> float | None:
    """The run's median of one client's back-to-back EVALSHA round trip
    (µs; 1 / the evalsha_c1 ceiling's rate over its reps), None without."""
    rates = [line["value"] for rep in run.get("ceiling", {}).get("runs", [])
             for line in rep.get("lines", []) if line.get("metric") == "evalsha_c1"
             and line.get("value")]
    return 1e6 / statistics.median(rates) if rates else None


def trip(run: dict[str, Any]) -> str:
    """The run's kind of host and the band of its round trip
    (TRIP_BANDS_US): "Intel Xeon, trip < 40 µs", "AMD EPYC, trip ≥ 90 µs"."""
    us = round_trip_us(run)
    low, high = TRIP_BANDS_US
    band = ("trip ?" if us is None else f"trip < {low:g} µs" if us < low
            else f"trip {low:g}-{high:g} µs" if us < high else f"trip ≥ {high:g} µs")
    return f"{host(run)}, {band}"


# asyncio's park and wake alone under the 100-task column (the run's own
# concurrent_floor_bare, calls/s, measured since 2026-12-06 11:38 UTC), in
# these bands: what the client's CPU does for a Python caller, which
# neither the CPU's name nor the round trip says (the Intel Xeon host and
# the fast AMD EPYC one of 2026-12-07 had alike round trips, and floors of
# 715-734k and 848-875k)
FLOOR_BANDS = (700_000.0, 800_000.0)


def park_and_wake(run: dict[str, Any]) -> float | None:
    """The run's park-and-wake floor on asyncio's loop (calls/s: the median
    over its reps, as its report gives it), None where it was not measured."""
    value = (run.get("summary", {}).get("leasequeue", {})
             .get("concurrent_floor_bare") or {}).get("value")
    return float(value) if value else None


def floor(run: dict[str, Any]) -> str:
    """The run's kind of host and the band of its park-and-wake floor
    (FLOOR_BANDS, in thousands of calls/s): "AMD EPYC, floor ≥ 800k"."""
    calls = park_and_wake(run)
    low, high = (f"{b / 1000:g}k" for b in FLOOR_BANDS)
    band = ("floor ?" if calls is None else f"floor < {low}" if calls < FLOOR_BANDS[0]
            else f"floor {low}-{high}" if calls < FLOOR_BANDS[1] else f"floor ≥ {high}")
    return f"{host(run)}, {band}"


def day(run: dict[str, Any]) -> str:
    return str(run["date"][:10])


def standing(runs: list[dict[str, Any]], by: str = "day") -> list[str]:
    """The table: per column, per day (or per kind of host) the range of lq
    ÷ best (its runs), then over every run the median and the runs that met
    the target."""
    key = {"host": host, "trip": trip, "floor": floor}.get(by, day)
    groups = sorted({key(r) for r in runs})
    by_run = [(key(r), best_ratios(r)) for r in runs]
    days = sorted({day(r) for r in runs})
    what = {"day": "day", "host": "kind of host",
            "floor": "kind of host and asyncio's park-and-wake floor (the run's "
                     "concurrent_floor_bare, calls/s)"}.get(
        by, "kind of host and one client's round trip (the run's evalsha_c1 ceiling)")
    out = [f"lq ÷ the best peer in the same run, {_count(len(runs), 'run')} on "
           f"{_count(len(days), 'day')} ({', '.join(days)}); per {what}: "
           f"lowest-highest (runs)", ""]
    out.append("| column | " + " | ".join(groups) + " | median | target | runs at target |")
    out.append("|---|" + "---:|" * len(groups) + "---:|---:|---:|")
    for i, (label, *_rest) in enumerate(BEST_COLUMNS):
        target = TARGETS.get(label, 1.0)
        cells: list[str] = []
        every: list[float] = []
        for group in groups:
            ratios = [ratio for g, rows in by_run
                      if g == group and (ratio := rows[i][3]) is not None]
            every += ratios
            cells.append(f"{min(ratios):.2f}-{max(ratios):.2f} ({len(ratios)})" if ratios
                         else "–")
        met = sum(r >= target for r in every)
        median = f"{statistics.median(every):.2f}×" if every else "–"
        out.append(f"| {label} | " + " | ".join(cells)
                   + f" | {median} | ≥ {target:g}× | {met} of {len(every)} |")
    out.append("")
    if by == "floor":
        out += tasks_rates(runs, groups, key)
    out += floor_band(runs)
    for group in groups:  # which runs, at which commits
        out.append(f"{group}: " + ", ".join(
            f"{r['_dir'].removeprefix('node_peers_') or '.'} "
            f"({r['date'][:16] if by != 'day' else r['date'][11:16]}, {r['git']})"
            for r in runs if key(r) == group))
    return out


TASKS_COLUMN = "enqueue, 100 concurrent tasks (jobs/s)"


def tasks_rates(runs: list[dict[str, Any]], groups: list[str],
                key: Callable[[dict[str, Any]], str]) -> list[str]:
    """--by floor: per group, the two rates whose ratio the 100-task row
    gives (ours and the best peer's, jobs/s) beside the park-and-wake
    floor (calls/s), each lowest-highest: a ratio moves with both sides,
    and a host's speed moves our client and Node's apart. Then a blank line."""
    i = [column[0] for column in BEST_COLUMNS].index(TASKS_COLUMN)
    out = []
    for group in groups:
        members = [r for r in runs if key(r) == group]
        rows = [best_ratios(r)[i] for r in members]
        ours = _present(row[1] for row in rows)
        best = _present(row[2][1] if row[2] else None for row in rows)
        floors = _present(park_and_wake(r) for r in members)
        out.append(f"{group}: 100 tasks, ours {_rates(ours)} jobs/s, the best peer's "
                   f"{_rates(best)}; park and wake {_rates(floors)} calls/s")
    return [*out, ""]


def _rates(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}" if values else "–"


def _band(values: list[float]) -> str:
    return (f"{min(values):.2f}-{max(values):.2f} (median {statistics.median(values):.2f})"
            if values else "–")


def floor_band(runs: list[dict[str, Any]]) -> list[str]:
    """The 100-task column against the event loop's own floors
    (report.floor_rows), over the runs that measured them: per loop, a line
    against the floor with one empty script call a batch, and one against
    park and wake alone (the µs a job takes beyond it, ours and at the
    target), each where some run measured it; then a blank line; none when
    no run did."""
    floors = (  # (against, the FloorRow field it needs, the figure, ours, the target's)
        ("its floor with one empty script call a batch", "mark", FloorRow.over_mark,
         "leasequeue ÷ floor", f"{TASKS_TARGET:g}× the best peer ÷ floor"),
        ("park and wake alone", "bare", FloorRow.beyond,
         "µs a job beyond it, leasequeue", f"at {TASKS_TARGET:g}× the best peer"))
    out = []
    for loop, *_ in FLOORS:
        rows = [row for r in runs for row in floor_rows(r) if row.loop == loop]
        for against, measured, figure, ours, target in floors:
            found = [row for row in rows if getattr(row, measured)]
            if found:
                out.append(
                    f"100 tasks on {loop}'s loop against {against}, "
                    f"{_count(len(found), 'run')}: {ours} "
                    f"{_band(_present(figure(row, row.ours) for row in found))}; {target} "
                    f"{_band(_present(figure(row, row.target) for row in found))}")
    return [*out, ""] if out else []


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


# one enqueue per call: leasequeue's App and the Node peers, by where the client ran
ONE_PER_CALL = (("leasequeue `App`", "leasequeue", "enqueue_one"),
                ("leasequeue `SyncApp`", "leasequeue", "enqueue_one_sync"),
                ("leasequeue `App`, uvloop", "leasequeue", "enqueue_one_uvloop"),
                ("bee-queue", "bee-queue-node", "enqueue_one"),
                ("BullMQ", "bullmq-node", "enqueue_one"))
E2S = (("leasequeue", "leasequeue"), ("bee-queue", "bee-queue-node"), ("BullMQ", "bullmq-node"))


def _runs_of(run: dict[str, Any], queue: str) -> list[dict[str, Any]]:
    """A queue's reps in a run (its "runs" list)."""
    side = run["leasequeue"] if queue == "leasequeue" else run["peers"].get(queue, {})
    return list(side.get("runs", []))


def _reps(run: dict[str, Any], queue: str, metric: str) -> list[dict[str, Any]]:
    """A queue's lines of ``metric`` in a run that carry a placement."""
    return [x for r in _runs_of(run, queue) for x in r.get("lines", [])
            if x.get("metric") == metric and x.get("placement")]


def placement(runs: list[dict[str, Any]]) -> list[str]:
    """--placement: over the runs that recorded where their processes ran
    (run.py, sched_trace.py), one enqueue per call split by where its
    processes were, and every enqueue->start probe by where its three
    processes were."""
    placed = [r for r in runs if placement_recorded(r)]
    out = [f"{_count(len(placed), 'run')} that recorded placement "
           f"({', '.join(r['_dir'] for r in placed)})", ""]
    return out + one_per_call_split(placed) + [""] + probe_table(placed)


def one_per_call_split(placed: list[dict[str, Any]]) -> list[str]:
    """Each queue's one-per-call reps in two groups: quiet runs by whether
    the client shared Redis's CPU over half the window; runs beside a load
    (--busy) by whether Redis shared the load's CPU over half the window
    (with three processes on two CPUs the two shares go together: this
    splits by one of them, and says nothing of which one decides)."""
    busy = any(r.get("busy") for r in placed)
    pair, what = (("redis_with_load", "Redis on the load's CPU") if busy
                  else ("client_with_redis", "the client on Redis's CPU"))
    out = [f"| one enqueue per call | reps with {what} over half the window: "
           "calls/s, median (reps) | the other reps |", "|---|---:|---:|"]
    for label, queue, metric in ONE_PER_CALL:
        groups: tuple[list[float], list[float]] = ([], [])
        for run in placed:
            for x in _reps(run, queue, metric):
                share = x["placement"].get(pair)
                if share is not None and x.get("value") is not None:
                    groups[0 if share > 0.5 else 1].append(float(x["value"]))
        cells = [f"{statistics.median(v):,.0f} ({len(v)})" if v else "–" for v in groups]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def probe_table(placed: list[dict[str, Any]]) -> list[str]:
    """Every enqueue->start probe of the runs, by where its three processes
    were as its handler started (report.probe_groups): probes, p50 in ms."""
    out = ["| enqueue→start, every probe | " + " | ".join(PLACES) + " | other |",
           "|---|" + "---:|" * (len(PLACES) + 1)]
    for label, queue in E2S:
        runs = [r for run in placed for r in _runs_of(run, queue)]
        out.append(f"| {label} | " + " | ".join(probe_cells(probe_groups(runs))) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path,
                    help="result directories (default: every results/node_peers_*)")
    ap.add_argument("--since", default="", help="only runs from this day on (YYYY-MM-DD)")
    ap.add_argument("--by", choices=("day", "host", "trip", "floor"), default="day",
                    help="band the runs per day (default), per kind of host, or per kind "
                         "of host and band of one client's round trip (trip) or of its "
                         "event loop's park-and-wake floor (floor)")
    ap.add_argument("--busy", action="store_true",
                    help="the runs beside a load (run.py --busy) instead of the quiet ones")
    ap.add_argument("--placement", action="store_true",
                    help="one enqueue per call and the enqueue->start probes by where "
                         "the processes ran (the runs that recorded it)")
    args = ap.parse_args()
    dirs = args.dirs or sorted(RESULTS.glob("node_peers_*"))
    runs = [r for r in load(dirs, args.busy) if r["date"][:10] >= args.since]
    if not runs:
        sys.exit("no run against both Node peers in those directories")
    print("\n".join(placement(runs) if args.placement else standing(runs, args.by)))


if __name__ == "__main__":
    main()

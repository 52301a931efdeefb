"""Turns the raw lines of every run into medians (summarize) and the
Markdown report (markdown). Stdlib only."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

RATE_METRICS = ("enqueue_one", "enqueue_concurrent", "enqueue_bulk", "drain", "memory_per_job",
                "drain_c1")  # drain_c1: the Node peers only
LQ_RATES = ("enqueue_one", "enqueue_one_sync", "enqueue_one_uvloop", "enqueue_concurrent",
            "enqueue_concurrent_uvloop", "enqueue_bulk", "drain_c1",
            "drain_c10", "drain_c100", "drain_2proc", "bare_claim_ack_1", "bare_claim_ack_100",
            "memory_per_job", "concurrent_floor", "concurrent_floor_uvloop",
            "concurrent_floor_bare", "concurrent_floor_bare_uvloop")
LQ_DRAIN_FOR_PEERS = "drain_c100"  # 1 process, concurrency 100: the peers' setting


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def _lines(runs: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    return [x for r in runs for x in r.get("lines", []) if x.get("metric") == metric]


def _errors(runs: list[dict[str, Any]]) -> list[str]:
    errs = [r["error"] for r in runs if r.get("error")]
    errs += [f"{x['metric']}: {x['error']}" for r in runs for x in r.get("lines", [])
             if x.get("error")]
    return list(dict.fromkeys(errs))  # distinct, in order


def _rate(runs: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    lines = [x for x in _lines(runs, metric) if x.get("value") is not None]
    out: dict[str, Any] = {"value": _median([float(x["value"]) for x in lines]),
                           "reps": [x["value"] for x in lines]}
    for cpu in ("redis_cpu_pct", "workers_cpu_pct", "redis_us_per_job"):
        got = [float(x[cpu]) for x in lines if x.get(cpu) is not None]
        if got:
            out[cpu] = _median(got)
    if any(x.get("complete") is False for x in lines):
        out["partial"] = (f"cut at the time budget: measured over "
                          f"{min(int(x.get('measured_jobs', 0)) for x in lines):,}+ of "
                          f"{int(lines[0].get('n', 0)):,} jobs")
    notes = [x["note"] for x in _lines(runs, metric) if x.get("note")]
    if notes:
        out["note"] = notes[0]
    return out


def _latency(runs: list[dict[str, Any]], metric: str,
             ps: tuple[str, ...] = ("p50_ms", "p99_ms")) -> dict[str, Any]:
    lines = [x for x in _lines(runs, metric) if x.get("p50_ms") is not None]
    out: dict[str, Any] = {p: _median([float(x[p]) for x in lines]) for p in ps}
    out["n"] = min((int(x["n"]) for x in lines), default=0)
    notes = [x["note"] for x in _lines(runs, metric) if x.get("note")]
    if notes and not lines:
        out["note"] = notes[0]
    return out


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {"ceiling": {}, "leasequeue": {}, "peers": {}}
    c_runs = results["ceiling"].get("runs", [])
    for label in ("evalsha_c50", "evalsha_c50_p16", "evalsha_c1"):
        lines = [x for x in _lines(c_runs, label) if "value" in x]
        summary["ceiling"][label] = {
            k: _median([float(x[k]) for x in lines]) for k in ("value", "p50_ms", "p99_ms")}
    summary["ceiling"]["errors"] = _errors(c_runs)

    lq = results["leasequeue"]
    claim_lines = lq.get("claim", {}).get("lines", [])
    claim: list[dict[str, Any]] = []
    for key in dict.fromkeys((x["size"], x["batch"]) for x in claim_lines
                             if x["metric"] == "lq_claim"):
        group = [x for x in claim_lines
                 if x["metric"] == "lq_claim" and (x["size"], x["batch"]) == key]
        claim.append({"size": key[0], "batch": key[1], "n": group[0]["n"], "reps": len(group),
                      **{p: _median([float(x[p]) for x in group])
                         for p in ("p50_ms", "p99_ms", "p99.9_ms")}})
    fills = {x["size"]: x["value"] for x in claim_lines if x["metric"] == "lq_fill"}
    runs = lq.get("runs", [])
    s_lq: dict[str, Any] = {"claim": claim, "fill_rates": fills}
    for m in LQ_RATES:
        s_lq[m] = _rate(runs, m)
    s_lq["e2s"] = _latency(runs, "e2s")
    s_lq["errors"] = _errors([*runs, lq.get("claim", {})])
    info = _lines(runs, "info")
    s_lq["config"] = info[0]["config"] if info else ""
    summary["leasequeue"] = s_lq

    for name, peer in results["peers"].items():
        runs = peer.get("runs", [])
        info = _lines(runs, "info")
        s: dict[str, Any] = {
            "version": info[0].get("version") if info else None,
            "config": info[0].get("config") if info else None,
            "bulk_api": info[0].get("bulk_api") if info else None,
            "concurrency": info[0].get("concurrency") if info else None,
        }
        for m in RATE_METRICS:
            s[m] = _rate(runs, m)
        s["e2s"] = _latency(runs, "e2s")
        s["errors"] = ([peer["error"]] if peer.get("error") else []) + _errors(runs)
        summary["peers"][name] = s
        if s["version"]:
            results["versions"][name] = s["version"]
    return summary


# -- Markdown ------------------------------------------------------------------

def _num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "–"
    return f"{v:,.{digits}f}"


def _one(v: float | None) -> str:
    return _num(v, 1)


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 10 else f"{v:,.1f}"


def _ratio(v: float | None, base: float | None) -> str:
    if v is None or not base:
        return "–"
    r = v / base
    return f"{r:.2f}×" if r < 10 else f"{r:.0f}×"


def _cpu(rate: dict[str, Any]) -> str:
    """CPU during the drain, % of one core (2 cores = 200%)."""
    if rate.get("redis_cpu_pct") is None:
        return "–"
    workers = rate.get("workers_cpu_pct")
    return f"{rate['redis_cpu_pct']:.0f} / {'–' if workers is None else f'{workers:.0f}'}"


def _pct(v: float | None, base: float | None) -> str:
    if v is None or not base:
        return "–"
    return f"{100 * v / base:.0f}%"


def markdown(results: dict[str, Any]) -> str:
    out: list[str] = []
    _header(results, out)
    _peers_table(results, out)
    _best_peer_table(results, out)
    _floor_table(results, out)
    _placement_table(results, out)
    _leasequeue_section(results, out)
    _ceiling_section(results, out)
    return "\n".join(out) + "\n"


def _header(results: dict[str, Any], out: list[str]) -> None:
    m = results["machine"]
    st = results["settings"]
    w = out.append
    w("# leasequeue benchmark results\n")
    w(f"- date: {results['date']} — mode: **{results['mode']}** "
      f"({st['reps']} repetition(s); every figure is the median over them)")
    w(f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} RAM, {m['os']}; load "
      f"average (1/5/15 min) {m.get('loadavg_start')} at the start, {m.get('loadavg_end')} "
      "at the end (anything else running skews the figures)")
    w(f"- Python {m['python']}, Redis {results['versions'].get('redis')} (one local "
      "redis-server, loopback, no persistence, shared by every run below)")
    stolen = _stolen(results)
    if stolen:
        w("- " + stolen)
    if results.get("busy"):
        w(f"- **beside a process busy {results['busy']:.0%} of the time** (`--busy "
          f"{results['busy']}`, duty_load.py): a busy host, not the quiet one")
    if results.get("pinned"):
        w("- **pinned** (`--pin`): redis-server on CPU 0, every client and its workers on "
          "the other CPUs")
    w(f"- leasequeue commit: {results.get('git', '?')}; code fingerprint "
      f"{results.get('code_fingerprint_start')}"
      + ("" if results.get("code_fingerprint_end") == results.get("code_fingerprint_start")
         else f" at the start, {results.get('code_fingerprint_end')} at the end: **the "
              "package was edited during the run, figures may mix versions**"))
    w("- versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()))
    w(f"- harness time: {results['bench_seconds']:.0f} s "
      f"(+ {results['install_seconds']:.0f} s installing peers)")
    w("- produced by `python benchmarks/run.py" + (" --quick" if results["mode"] == "quick"
                                                   else "")
      + (f" --busy {results['busy']}" if results.get("busy") else "")
      + (" --pin" if results.get("pinned") else "")
      + "`; see benchmarks/README.md\n")


STEAL_NOTED = 1.0  # % of the CPUs' time: a bench the hypervisor took more of is named


def _stolen(results: dict[str, Any]) -> str:
    """The hypervisor's steal over the run, and the benches it took at least
    STEAL_NOTED% of the CPUs from ('' for a run from before it was recorded)."""
    whole = results["machine"].get("steal_pct")
    if whole is None:
        return ""
    marked = []
    for source in sources(results):
        for rep in source.runs:
            # (a rep's lines come from one bench process: they carry one share)
            share = max((line["steal_pct"] for line in rep.get("lines", [])
                         if "steal_pct" in line), default=0.0)
            if share >= STEAL_NOTED:
                marked.append(f"{source.name} rep {rep.get('rep', '?')} {share:.1f}%")
    named = f"; benches at {STEAL_NOTED:.0f}% or more: " + ", ".join(marked) if marked else ""
    return (f"steal (CPU time the hypervisor gave other guests): {whole:.1f}% of the CPUs' "
            f"time over the run (its install step included){named}")


def _peers_table(results: dict[str, Any], out: list[str]) -> None:
    s = results["summary"]
    lq = s["leasequeue"]
    st = results["settings"]
    w = out.append
    base_drain = lq[LQ_DRAIN_FOR_PEERS]["value"]
    base_one = lq["enqueue_one"]["value"]
    base_bulk = lq["enqueue_bulk"]["value"]
    base_e2s = lq["e2s"].get("p50_ms")
    base_conc = lq["enqueue_concurrent"]["value"]
    base_us = lq[LQ_DRAIN_FOR_PEERS].get("redis_us_per_job")
    base_mem = lq["memory_per_job"]["value"]
    w(f"## Against the peers (no-op job, {st['n']:,} jobs drained, same Redis)\n")
    w("Ratios are peer ÷ leasequeue: above 1× the peer is faster for throughput, slower "
      "for latency, and costs more for the Redis CPU and memory columns. leasequeue's row "
      "is 1 worker process at concurrency 100 (its Redis CPU per job is from that drain).\n")
    w("| queue | drain jobs/s | ×lq | CPU % Redis / workers | enqueue 1/call jobs/s | ×lq "
      "| enqueue 100 tasks jobs/s | ×lq "
      "| enqueue bulk jobs/s | ×lq | enqueue→start p50 ms | p99 ms | ×lq (p50) "
      "| Redis CPU µs / drained job | ×lq | used_memory B / queued job | ×lq "
      "| configuration |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    w(f"| **leasequeue** {results['versions']['leasequeue']} | {_num(base_drain)} | 1× "
      f"| {_cpu(lq[LQ_DRAIN_FOR_PEERS])} "
      f"| {_num(base_one)} | 1× | {_num(base_conc)} | 1× | {_num(base_bulk)} | 1× "
      f"| {_ms(base_e2s)} "
      f"| {_ms(lq['e2s'].get('p99_ms'))} | 1× | {_num(base_us, 1)} | 1× "
      f"| {_num(base_mem)} | 1× | {lq['config']}; bulk = App.enqueue_many |")
    notes: list[str] = []
    for name, p in s["peers"].items():
        if p["version"] is None:
            err = p["errors"][0] if p["errors"] else "no output"
            w(f"| {name} | failed | | | | | | | | | | | | | | | | {err[:200]} |")
            continue
        drain = p["drain"]
        d_txt = _num(drain["value"]) + ("*" if drain.get("partial") else "")
        e = p["e2s"]
        bulk = p["enqueue_bulk"]["value"]
        conc = (p.get("enqueue_concurrent") or {}).get("value")
        mem = (p.get("memory_per_job") or {}).get("value")
        w(f"| {name} {p['version']} | {d_txt} | {_ratio(drain['value'], base_drain)} "
          f"| {_cpu(drain)} "
          f"| {_num(p['enqueue_one']['value'])} | {_ratio(p['enqueue_one']['value'], base_one)} "
          f"| {_num(conc)} | {_ratio(conc, base_conc)} "
          f"| {_num(bulk) if bulk is not None else '– (no bulk API)'} "
          f"| {_ratio(bulk, base_bulk)} | {_ms(e.get('p50_ms'))} | {_ms(e.get('p99_ms'))} "
          f"| {_ratio(e.get('p50_ms'), base_e2s)} "
          f"| {_num(drain.get('redis_us_per_job'), 1)} "
          f"| {_ratio(drain.get('redis_us_per_job'), base_us)} "
          f"| {_num(mem)} | {_ratio(mem, base_mem)} | {p['config']}"
          + (f"; bulk = {p['bulk_api']}" if p["bulk_api"] else "") + " |")
        if drain.get("partial"):
            notes.append(f"{name}: drain {drain['partial']}")
        if e.get("note"):
            notes.append(f"{name}: enqueue→start {e['note']}")
        elif e.get("n") and e["n"] < st["e2s_n"]:
            notes.append(f"{name}: enqueue→start from {e['n']} probes (the rest did not fit "
                         f"the {st['e2s_budget']:.0f} s budget)")
        notes.extend(f"{name}: error: {err[:300]}" for err in p["errors"])
    w("")
    if notes:
        w("Notes (\\* = drain cut by its time budget; the rate is over the jobs that did run):\n")
        out.extend(f"- {n}" for n in notes)
        w("")



# column -> (where leasequeue's figure is, the peers' metric, field, higher is better)
BEST_COLUMNS = (
    ("drain, concurrency 100 (jobs/s)", LQ_DRAIN_FOR_PEERS, "drain", "value", True),
    # the Node peers run it (node/common.mjs); the Python peers' driver does not
    ("drain, concurrency 1 (jobs/s; the Node peers)", "drain_c1", "drain_c1", "value", True),
    ("enqueue, one per call (jobs/s)", "enqueue_one", "enqueue_one", "value", True),
    # the same peers' figure against leasequeue's sync producer (SyncApp)
    ("enqueue, one per call, SyncApp (jobs/s)", "enqueue_one_sync", "enqueue_one", "value",
     True),
    # the same from an App on uvloop's event loop (a service run by uvicorn with uvloop)
    ("enqueue, one per call, App on uvloop (jobs/s)", "enqueue_one_uvloop", "enqueue_one",
     "value", True),
    ("enqueue, 100 concurrent tasks (jobs/s)", "enqueue_concurrent", "enqueue_concurrent",
     "value", True),
    ("enqueue, 100 concurrent tasks, App on uvloop (jobs/s)", "enqueue_concurrent_uvloop",
     "enqueue_concurrent", "value", True),
    ("enqueue, bulk (jobs/s)", "enqueue_bulk", "enqueue_bulk", "value", True),
    ("enqueue → start p50 (ms)", "e2s", "e2s", "p50_ms", False),
    ("enqueue → start p99 (ms)", "e2s", "e2s", "p99_ms", False),
    ("Redis CPU µs per drained job (concurrency 100)", LQ_DRAIN_FOR_PEERS, "drain",
     "redis_us_per_job", False),
    ("used_memory bytes per queued no-op job", "memory_per_job", "memory_per_job", "value",
     False),
)


def best_ratios(results: dict[str, Any]) -> list[
        tuple[str, float | None, tuple[str, float] | None, float | None]]:
    """Per column of BEST_COLUMNS: (its label, leasequeue's figure, the best
    peer's (name, figure) in the same run, lq ÷ best: above 1 leasequeue
    leads); None where a side has no figure."""
    s = results["summary"]
    lq = s["leasequeue"]
    rows: list[tuple[str, float | None, tuple[str, float] | None, float | None]] = []
    for label, lq_metric, metric, field, higher in BEST_COLUMNS:
        mine = lq.get(lq_metric, {}).get(field)
        best: tuple[str, float] | None = None
        for name, p in s["peers"].items():
            v = (p.get(metric) or {}).get(field) if p.get("version") else None
            if v is None:
                continue
            if best is None or (v > best[1] if higher else v < best[1]):
                best = (name, float(v))
        ratio = None
        if mine is not None and best is not None:
            ratio = mine / best[1] if higher else best[1] / mine
        rows.append((label, mine, best, ratio))
    return rows


def _best_peer_table(results: dict[str, Any], out: list[str]) -> None:
    """Per column: leasequeue against the best peer in that column, this run."""
    w = out.append
    w("## Against the best peer, per column (this run)\n")
    w("lq ÷ best: above 1× leasequeue leads (for latency and the costs per job: the best "
      "peer's figure ÷ ours).\n")
    w("| column | leasequeue | best peer | its figure | lq ÷ best |")
    w("|---|---:|---|---:|---:|")
    for (label, mine, best, ratio), (_, _, _, field, higher) in zip(
            best_ratios(results), BEST_COLUMNS, strict=True):
        if mine is None or best is None or ratio is None:
            w(f"| {label} | {mine if mine is not None else '–'} | – | – | – |")
            continue
        fmt = _num if higher else _ms if field.endswith("_ms") else _one
        w(f"| {label} | {fmt(mine)} | {best[0]} | {fmt(best[1])} | {ratio:.2f}× |")
    w("")

# the 100-task column's event-loop floors per loop: (loop, leasequeue's metric,
# the floor with one empty script call a batch, park and wake alone), all
# measured in leasequeue's bench process (lq_bench.py)
FLOORS = (("asyncio", "enqueue_concurrent", "concurrent_floor", "concurrent_floor_bare"),
          ("uvloop", "enqueue_concurrent_uvloop", "concurrent_floor_uvloop",
           "concurrent_floor_bare_uvloop"))
TASKS_TARGET = 3.0  # issue 11's target for the 100-task column: lq ÷ the best peer


@dataclass(frozen=True)
class FloorRow:
    """The 100-task column on one loop against that loop's floors, one run
    (rates in calls or jobs a second; None where the run has no figure)."""

    loop: str
    bare: float | None  # park and wake alone: no Redis, no job, no I/O (a bound)
    mark: float | None  # the same, waiting out one empty script call a batch (a mark)
    ours: float | None  # leasequeue's 100 tasks
    best: float | None  # the best peer's 100 tasks

    @property
    def target(self) -> float | None:
        """Issue 11's target for the column: TASKS_TARGET × the best peer."""
        return None if self.best is None else TASKS_TARGET * self.best

    def over_mark(self, rate: float | None) -> float | None:
        """``rate`` ÷ the floor with one empty script call a batch."""
        return None if rate is None or not self.mark else rate / self.mark

    def beyond(self, rate: float | None) -> float | None:
        """Microseconds a job at ``rate`` takes beyond parking and waking its
        caller (1/rate − 1/bare): what the job's own work (its id, envelope,
        batch and script call, reply) may take at that rate. Negative: the
        rate is above park and wake alone."""
        if not rate or not self.bare:
            return None
        return 1e6 / rate - 1e6 / self.bare


def floor_rows(results: dict[str, Any]) -> list[FloorRow]:
    """Per loop whose floor the run measured (either), a FloorRow. A run
    from before the floors were measured has none; one from before park and
    wake alone was (before 631b6fe, 2026-12-06 11:38 UTC) has only the mark."""
    lq = results["summary"]["leasequeue"]
    # the best peer of the 100-task column, as best_ratios chose it
    best = next((found[1] for (_, _, found, _), column in zip(
        best_ratios(results), BEST_COLUMNS, strict=True)
        if column[1] == "enqueue_concurrent" and found is not None), None)
    rows: list[FloorRow] = []
    for loop, ours_metric, mark_metric, bare_metric in FLOORS:
        mark = (lq.get(mark_metric) or {}).get("value")
        bare = (lq.get(bare_metric) or {}).get("value")
        if not mark and not bare:
            continue
        ours = (lq.get(ours_metric) or {}).get("value")
        rows.append(FloorRow(loop, float(bare) if bare else None,
                             float(mark) if mark else None,
                             None if ours is None else float(ours), best))
    return rows


def _floor_table(results: dict[str, Any], out: list[str]) -> None:
    """The 100-task column against the event loop's own floors, this run."""
    rows = floor_rows(results)
    if not rows:
        return
    w = out.append
    w("## 100 tasks against the event loop's own floor (this run)\n")
    w("Park and wake alone: as many calls from 100 tasks as the column's, each parking a "
      "future that one coalescer task resolves a batch at a time, with no Redis, no job and "
      "no I/O (`benchmarks/concurrent_floor.py`): what every caller awaiting a coroutine "
      "of its own a call (an `async def` enqueue, as `App.enqueue` is) costs on that "
      "loop, a bound. With one empty script call a batch: the same, the coalescer waiting "
      "out one empty script call (redis-py's) before it resolves each batch: a mark, not a "
      "bound (leasequeue sends through connections of its own, and keeps one batch in "
      "Redis while the client prepares the next). Both run in leasequeue's bench process "
      "right after its own 100 tasks, on the same loop (the second on the same Redis); "
      "each figure is a median of the reps, each ratio one of medians. The last two "
      "columns: the µs a job takes beyond parking and waking its caller (1/rate − "
      "1/park-and-wake rate), at leasequeue's rate and at issue 11's target for the "
      f"column ({TASKS_TARGET:g}× the best peer): what a job's own work (its id, envelope, "
      "batch and script call, reply) takes, and what the target leaves it; each a "
      "difference of two medians whose reps move, to be read to about a µs.\n")
    w(f"| loop | park and wake alone (calls/s) | with one empty script call a batch "
      f"(calls/s) | leasequeue (jobs/s) | {TASKS_TARGET:g}× best peer (jobs/s) "
      f"| leasequeue ÷ the second | {TASKS_TARGET:g}× best peer ÷ the second "
      f"| µs a job beyond park and wake: leasequeue | at {TASKS_TARGET:g}× best peer |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def ratio(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}"

    for row in rows:
        w(f"| {row.loop} | {_num(row.bare)} | {_num(row.mark)} | {_num(row.ours)} "
          f"| {_num(row.target)} | {ratio(row.over_mark(row.ours))} "
          f"| {ratio(row.over_mark(row.target))} | {_num(row.beyond(row.ours), 2)} "
          f"| {_num(row.beyond(row.target), 2)} |")
    w("")


# the columns an unpinned 2-CPU host's placement decides (README, "Where it
# is behind"): (label, leasequeue's metrics, the peers' metric)
PLACED = (("enqueue, one per call", ("enqueue_one", "enqueue_one_sync", "enqueue_one_uvloop"),
           "enqueue_one"),
          ("enqueue, 100 concurrent tasks", ("enqueue_concurrent", "enqueue_concurrent_uvloop"),
           "enqueue_concurrent"),
          ("enqueue→start p50", ("e2s",), "e2s"))
LQ_LABELS = {"enqueue_one": "leasequeue `App`", "enqueue_one_sync": "leasequeue `SyncApp`",
             "enqueue_one_uvloop": "leasequeue `App`, uvloop",
             "enqueue_concurrent": "leasequeue `App`",
             "enqueue_concurrent_uvloop": "leasequeue `App`, uvloop", "e2s": "leasequeue"}
# peers whose handlers run in forked children that never exec (Celery's prefork
# pool, Dramatiq's and taskiq's worker processes): their "worker" would be the
# supervisor the bench started (sched_trace.py), so its pairs are not given
WORKER_UNPLACED = ("celery", "dramatiq", "taskiq")
# where an enqueue->start probe's three processes were (sched_trace.Placement.probe)
PLACES = ("one CPU", "producer apart", "worker apart", "Redis apart", "all apart")


@dataclass(frozen=True)
class _Source:
    """One queue's reps in a run: its name, its runs, and whether it is
    leasequeue (which has several rows per placed column)."""

    name: str
    runs: list[dict[str, Any]]
    lq: bool


def placement_recorded(results: dict[str, Any]) -> bool:
    """Whether the run recorded where its processes ran (the key's first name,
    2026-12-06, was placement_sampled)."""
    return bool(results.get("placement_recorded", results.get("placement_sampled")))


def sources(results: dict[str, Any]) -> list[_Source]:
    """leasequeue's reps, then each peer's."""
    out = [_Source("leasequeue", results.get("leasequeue", {}).get("runs", []), True)]
    out += [_Source(name, p.get("runs", []), False)
            for name, p in results.get("peers", {}).items()]
    return out


def _share(v: Any) -> str:
    return "–" if v is None else f"{100 * float(v):.0f}%"


def _placed(line: dict[str, Any], worker: bool) -> str:
    """One rep's figure and where its processes ran (sched_trace.py); the
    worker's pairs only where ``worker`` (not WORKER_UNPLACED)."""
    p = line.get("placement") or {}
    figure = (f"{float(line['p50_ms']):.3f} ms" if "p50_ms" in line
              else _num(float(line["value"])))
    shares = [f"C·R {_share(p.get('client_with_redis'))}"] if p else []
    if p and "p50_ms" in line and worker:
        shares += [f"W·R {_share(p.get('worker_with_redis'))}",
                   f"C·W {_share(p.get('client_with_worker'))}"]
    if p.get("redis_with_load") is not None:  # run.py --busy: Redis beside the load?
        shares.append(f"R·L {_share(p.get('redis_with_load'))}")
    return f"{figure} ({', '.join(shares)})" if shares else figure


def _placement_table(results: dict[str, Any], out: list[str]) -> None:
    """Per rep of the placement-decided columns: the figure, and the share of
    its window in which the client was on Redis's CPU (C·R; for the probes
    also the worker, W·R, and the client and the worker, C·W; beside a load
    Redis and the load, R·L)."""
    if not placement_recorded(results):
        return
    w = out.append
    w("## Where each process ran\n")
    w("Per rep: the figure, then the share of its measured window in which two of its "
      "processes were assigned to one CPU, from the kernel's scheduler events "
      "(`sched_trace.py`): C·R the client (producer) and redis-server, W·R the worker "
      "and redis-server, C·W the client and the worker (not for Celery, Dramatiq and "
      "taskiq, whose handlers run in forked children not placed), and beside a load "
      "(run.py --busy) R·L redis-server and the load. On a 2-CPU host a client beside "
      "Redis takes turns with it on one CPU; apart, each wake-up crosses CPUs. "
      + ("The run pinned redis-server and the clients (--pin): this shows the pinning.\n"
         if results.get("pinned") else "\n"))
    w("| column | queue | reps |")
    w("|---|---|---|")
    for label, lq_metrics, peer_metric in PLACED:
        for src in sources(results):
            for metric in lq_metrics if src.lq else (peer_metric,):
                lines = [x for x in _lines(src.runs, metric)
                         if x.get("value") is not None or x.get("p50_ms") is not None]
                if not lines:
                    continue
                name = LQ_LABELS.get(metric, metric) if src.lq else src.name
                worker = src.name not in WORKER_UNPLACED
                w(f"| {label} | {name} | "
                  + "; ".join(_placed(x, worker) for x in lines) + " |")
    w("")
    _probe_places(results, out)


def probe_groups(runs: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The enqueue->start probes of ``runs``' e2s lines (ns), by where their
    three processes were as the handler started (run.py's placement)."""
    groups: dict[str, list[float]] = {}
    for x in _lines(runs, "e2s"):
        where = ((x.get("placement") or {}).get("probes") or {}).get("where")
        if not where or len(where) != len(x.get("probes", [])):
            continue
        for place, (_, ns) in zip(where, x["probes"], strict=True):
            groups.setdefault(place, []).append(float(ns))
    return groups


def probe_cells(groups: dict[str, list[float]]) -> list[str]:
    """Per PLACES (then any other): how many probes, and their p50 in ms."""
    cells = [f"{len(v)}: {percentile(v, 50) / 1e6:.3f}" if (v := groups.get(place)) else "–"
             for place in PLACES]
    other = sum(len(v) for k, v in groups.items() if k not in PLACES)
    return [*cells, str(other or "–")]


def _probe_places(results: dict[str, Any], out: list[str]) -> None:
    """The enqueue->start probes of every rep, by where the producer, the
    worker and Redis were as the handler started: how many, and their p50."""
    rows = [(src.name, groups) for src in sources(results)
            if src.name not in WORKER_UNPLACED and (groups := probe_groups(src.runs))]
    if not rows:
        return
    w = out.append
    w("Enqueue→start, every probe of the reps by where its three processes were as its "
      "handler started (producer and worker on one CPU with Redis on the other is "
      "\"Redis apart\"; a snapshot at that instant, where the window's shares above "
      "weigh the idle time between probes too): probes, and their p50 in ms.\n")
    w("| queue | " + " | ".join(PLACES) + " | other |")
    w("|---|" + "---:|" * (len(PLACES) + 1))
    for name, groups in rows:
        w(f"| {name} | " + " | ".join(probe_cells(groups)) + " |")
    w("")


def percentile(samples: list[float], p: float) -> float:
    """Nearest rank, as common.percentile (report.py is stdlib only)."""
    ordered = sorted(samples)
    return ordered[max(1, min(len(ordered), int(-(-p * len(ordered) // 100)))) - 1]


def _leasequeue_section(results: dict[str, Any], out: list[str]) -> None:
    s = results["summary"]
    lq, ceil = s["leasequeue"], s["ceiling"]
    w = out.append
    w("## leasequeue\n")
    w("### Claim latency: one claim script call, client side (redis-py asyncio)\n")
    w("The ready set is held at each size (every claimed job is acked and replaced, untimed). "
      "Flat rows mean the claim cost does not grow with the queue.\n")
    w("| ready jobs | batch | p50 ms | p99 ms | p99.9 ms | samples × reps |")
    w("|---:|---:|---:|---:|---:|---:|")
    for c in lq["claim"]:
        w(f"| {c['size']:,} | {c['batch']} | {_ms(c['p50_ms'])} | {_ms(c['p99_ms'])} "
          f"| {_ms(c['p99.9_ms'])} | {c['n']:,} × {c['reps']} |")
    for batch in (1, 50):
        rows = [c for c in lq["claim"] if c["batch"] == batch]
        if len(rows) >= 2 and rows[0]["p50_ms"]:
            w(f"\nbatch {batch}: p50 at {rows[-1]['size']:,} ÷ p50 at {rows[0]['size']:,} = "
              f"{rows[-1]['p50_ms'] / rows[0]['p50_ms']:.2f}")
    if lq.get("fill_rates"):
        w("\nFill (enqueue_many, 10k per call): " + ", ".join(
            f"{int(k):,} jobs at {_num(v)} jobs/s" for k, v in lq["fill_rates"].items()))
    w("")
    ceil_c50 = ceil["evalsha_c50"]["value"]
    ceil_p16 = ceil["evalsha_c50_p16"]["value"]
    w("### Throughput and latency, against the ceiling\n")
    w("Ceiling = redis-benchmark EVALSHA of a claim-shaped script (below). A drained job costs "
      "at least a share of a claim call and of an ack call, so 100% is out of reach by "
      "construction; the fraction shows how much of the server's script budget a figure uses.\n")
    w("| figure | value | % of ceiling unpipelined (50 clients) | % of ceiling pipelined ×16 "
      "| CPU % Redis / workers |")
    w("|---|---:|---:|---:|---:|")
    rows = [
        ("enqueue, one per call (jobs/s)", lq["enqueue_one"]),
        ("enqueue, one per call, sync producer SyncApp (jobs/s)", lq["enqueue_one_sync"]),
        ("enqueue, one per call, App on uvloop (jobs/s)", lq["enqueue_one_uvloop"]),
        ("enqueue, 100 concurrent tasks each one per call (jobs/s)", lq["enqueue_concurrent"]),
        ("enqueue, 100 concurrent tasks, App on uvloop (jobs/s)",
         lq["enqueue_concurrent_uvloop"]),
        (f"enqueue_many, {results['settings']['n']:,} per call (jobs/s)", lq["enqueue_bulk"]),
        ("drain, 1 process, concurrency 1 (jobs/s)", lq["drain_c1"]),
        ("drain, 1 process, concurrency 10 (jobs/s)", lq["drain_c10"]),
        ("drain, 1 process, concurrency 100 (jobs/s)", lq["drain_c100"]),
        ("drain, 2 processes × concurrency 100 (jobs/s)", lq["drain_2proc"]),
        ("bare loop: claim 1 + ack 1, one client (jobs/s)", lq["bare_claim_ack_1"]),
        ("bare loop: claim 100 + ack 100, one client (jobs/s)", lq["bare_claim_ack_100"]),
    ]
    for label, r in rows:
        v = r["value"]
        w(f"| {label} | {_num(v)} | {_pct(v, ceil_c50)} | {_pct(v, ceil_p16)} | {_cpu(r)} |")
    w("\nCPU: % of one core over the measured window (this machine has "
      f"{results['machine']['nproc']}), redis-server from INFO and the worker processes "
      "from /proc.")
    e = lq["e2s"]
    floor = ceil["evalsha_c1"].get("p50_ms")
    w(f"\nEnqueue→start on an idle worker (concurrency 10): p50 {_ms(e.get('p50_ms'))} ms, "
      f"p99 {_ms(e.get('p99_ms'))} ms over {e.get('n')} probes. One claim call at 1k ready "
      f"jobs: p50 {_ms(lq['claim'][0]['p50_ms']) if lq['claim'] else '–'} ms client side, "
      f"against {_ms(floor)} ms for a bare EVALSHA round trip from redis-benchmark (1 client).")
    if lq["errors"]:
        w("\nErrors: " + "; ".join(lq["errors"]))


def _ceiling_section(results: dict[str, Any], out: list[str]) -> None:
    ceil = results["summary"]["ceiling"]
    w = out.append
    w("\n### Ceiling: redis-benchmark on the same Redis\n")
    w("Script: `ZPOPMIN ready` → `HINCRBY stats seq` → `ZADD ready` (the popped id goes back "
      "at the end), keys `{bench:ceiling}:ready` and `{bench:ceiling}:stats`, 1,000 members.\n")
    w("| run | calls/s | p50 ms | p99 ms |")
    w("|---|---:|---:|---:|")
    for label, text in (("evalsha_c50", "50 clients, unpipelined"),
                        ("evalsha_c50_p16", "50 clients, pipeline 16"),
                        ("evalsha_c1", "1 client, unpipelined (round-trip floor)")):
        c = ceil[label]
        w(f"| {text} | {_num(c['value'])} | {_ms(c['p50_ms'])} | {_ms(c['p99_ms'])} |")
    if ceil["errors"]:
        w("\nErrors: " + "; ".join(ceil["errors"]))
    w("")

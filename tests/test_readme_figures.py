"""The README's benchmark tables of the latest runs and of the runs placed
apart, against the results files they link: every lq ÷ best ratio is what
report.best_ratios gives for its run, to the two decimals printed; a row
whose standing says "in all three" has all three at its target (or, for
"leads", over 1×), and its ranges are ours and the best peer's; the 100
tasks' floors table gives floor_rows' ranges over the latest runs; and
the band over days and hosts is standing.py's over the runs up to the
time the README gives it. A figure edited by hand, a standing that claims
more than its runs, or a table left behind by its runs fails here."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import report  # (benchmarks/ is a folder of scripts, not a package)
import standing

ROOT = Path(__file__).resolve().parent.parent

README = (ROOT / "README.md").read_text(encoding="utf-8")
# the README's row labels, by report.BEST_COLUMNS' own
LABELS = {
    "drain, concurrency 100": "drain, concurrency 100 (jobs/s)",
    "drain, concurrency 1": "drain, concurrency 1 (jobs/s; the Node peers)",
    "enqueue, one per call, `App`": "enqueue, one per call (jobs/s)",
    "enqueue, one per call, `App` on uvloop": "enqueue, one per call, App on uvloop (jobs/s)",
    "enqueue, one per call, `SyncApp`": "enqueue, one per call, SyncApp (jobs/s)",
    "enqueue, 100 concurrent tasks": "enqueue, 100 concurrent tasks (jobs/s)",
    "enqueue, 100 concurrent tasks, uvloop":
        "enqueue, 100 concurrent tasks, App on uvloop (jobs/s)",
    "enqueue, bulk": "enqueue, bulk (jobs/s)",
    "enqueue→start p50": "enqueue → start p50 (ms)",
    "enqueue→start p99": "enqueue → start p99 (ms)",
    "Redis CPU µs per drained job": "Redis CPU µs per drained job (concurrency 100)",
    "`used_memory` bytes per queued no-op job": "used_memory bytes per queued no-op job",
}
RUN_LINK = re.compile(r"\]\(benchmarks/results/([\w-]+)/results\.md\)")
RANGE = re.compile(r"(\d[\d,]*(?:\.\d+)?)-(\d[\d,]*(?:\.\d+)?)")  # "13,787-16,777", "0.453-0.561"


def block(opening: str) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """The runs linked in the README's paragraph that starts with
    ``opening`` (read up to its table), and that table's rows, as cells."""
    start = README.index(opening)
    table_at = README.index("\n|", start)
    dirs = RUN_LINK.findall(README[start:table_at])
    runs = [json.loads((ROOT / "benchmarks" / "results" / d / "results.json").read_text())
            for d in dirs]
    rows = []
    for line in README[table_at + 1:].split("\n"):
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return runs, rows[2:]  # (the header and its rule left out)


def span(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return f"{low:,.{digits}f}-{high:,.{digits}f}"


def ratio_cell(cell: str) -> float:
    return float(cell.strip("*").rstrip("×"))


@pytest.mark.parametrize("opening", ["Latest: three runs of main",
                                     "Half an hour before: three runs of main",
                                     "The evening before: three runs of main",
                                     "Earlier that evening: three runs of main",
                                     "Earlier that afternoon: three runs of main",
                                     "Earlier the same day: three runs of main",
                                     "**Placed apart.** The same"])
def test_each_ratio_of_the_readme_is_its_runs_and_each_standing_holds_in_them(
        opening: str) -> None:
    runs, rows = block(opening)
    assert len(runs) == 3, "the paragraph links its three runs"
    assert [row[0] for row in rows] == list(LABELS), "the twelve columns, in the README's order"
    computed = [{label: (mine, best, ratio) for label, mine, best, ratio
                 in report.best_ratios(run)} for run in runs]
    for label, *cells, target_cell, standing_text in rows:
        column = LABELS[label]
        ratios = [computed[i][column][2] for i in range(3)]
        assert all(r is not None for r in ratios), label
        shown = [ratio_cell(cell) for cell in cells]
        assert shown == [round(float(r), 2) for r in ratios if r is not None], label
        # bold where leasequeue is ahead
        assert [c.startswith("**") for c in cells] == [s > 1 for s in shown], label
        target = standing.TARGETS.get(column, 1.0)
        assert target_cell == f"≥ {target:g}×", label
        if "in all three" in standing_text:
            floor = target if "met" in standing_text else 1.0
            strict = "leads" in standing_text and "level" not in standing_text
            assert all(s > floor if strict else s >= floor for s in shown), (
                f"{label}: '{standing_text[:40]}' but {shown}")
        # its ranges: ours over the three runs, then the best peer's, as printed
        ours = [float(computed[i][column][0] or 0) for i in range(3)]
        peers = [computed[i][column][1] for i in range(3)]
        theirs = [float(p[1]) for p in peers if p is not None]
        found = RANGE.findall(standing_text)
        assert len(found) <= 2, label
        for (low, high), values in zip(found, (ours, theirs)[:len(found)], strict=True):
            digits = len(low.partition(".")[2])
            assert f"{low}-{high}" == span(values, digits), f"{label}: {low}-{high}"


def test_the_floors_table_gives_floor_rows_ranges_over_the_latest_runs() -> None:
    # (the floors' table reads the runs of 08:03-08:07, its paragraph's)
    runs, _ = block("Earlier the same day: three runs of main")
    _, rows = block("**The 100 tasks against the event loop's own floors**")
    assert [row[0] for row in rows] == ["asyncio", "uvloop"]
    for loop, bare, mark, target_over_mark, ours_beyond, target_beyond in rows:
        floors = [row for run in runs for row in report.floor_rows(run) if row.loop == loop]
        assert len(floors) == 3, loop
        got = {
            "bare": span([f.bare or 0 for f in floors], 0),
            "mark": span([f.mark or 0 for f in floors], 0),
            "target ÷ mark": span([f.over_mark(f.target) or 0 for f in floors], 2),
            "ours beyond": span([f.beyond(f.ours) or 0 for f in floors], 2),
            "target beyond": span([f.beyond(f.target) or 0 for f in floors], 2),
        }
        assert got == {"bare": bare, "mark": mark, "target ÷ mark": target_over_mark,
                       "ours beyond": ours_beyond, "target beyond": target_beyond}, loop


def test_the_band_over_days_and_hosts_is_standings_over_the_runs_up_to_its_stamp() -> None:
    start = README.index("**Over days and hosts.**")
    head = README[start:README.index("\n|", start)]
    since = re.search(r"--since\s+(\d{4}-\d\d-\d\d)", head)
    stamp = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d) UTC\):", head)
    count = re.search(r"\((\d+) runs\s+from", head)
    assert since and stamp and count, "the paragraph names its --since, its count and its time"
    runs = [r for r in standing.load(sorted((ROOT / "benchmarks" / "results").glob(
        "node_peers_*"))) if since[1] <= r["date"][:10] and r["date"][:16] <= stamp[1]]
    assert len(runs) == int(count[1])
    _, rows = block("**Over days and hosts.**")

    def cells(by: str) -> dict[str, list[str]]:
        table = [line for line in standing.standing(runs, by) if line.startswith("| ")]
        return {line.strip("|").split("|")[0].strip(): [
            re.sub(r" \(\d+\)$", "", cell.strip()).replace("1.09-1.09", "1.09")
            for cell in line.strip("|").split("|")[1:]] for line in table[1:]}

    days, hosts = cells("day"), cells("host")
    assert sorted(row[0] for row in rows) == sorted(LABELS)  # (in report.BEST_COLUMNS' order)
    for label, *shown in rows:
        column = LABELS[label]
        by_day, by_host = days[column], hosts[column]
        assert shown == [*by_day[:-3], *by_host[:-3], *by_day[-3:]], label

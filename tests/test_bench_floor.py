"""The harness's event-loop floors under the 100-task column (benchmarks/
concurrent_floor.py, measured by lq_bench.py after its own 100 tasks): park
and wake alone, and the same waiting out one empty script call a batch on a
real Redis, each answering every call; the report and the standing set the
column and issue 11's 3x against them."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import concurrent_floor  # (benchmarks/ is a folder of scripts, not a package)
import report
import standing

from tests.harness.redis_proc import RedisProcess


def test_the_floor_answers_every_call_of_100_tasks_with_a_batch_a_script_call(
        redis_server: RedisProcess) -> None:
    import redis as redis_sync

    client = redis_sync.Redis.from_url(redis_server.url)
    calls_before = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    result = asyncio.run(concurrent_floor.floor(5_000, redis_server.url, budget=30.0))
    calls = int(client.info("commandstats")["cmdstat_evalsha"]["calls"]) - calls_before
    client.close()
    assert result["n"] == 5_000 and result["tasks"] == 100
    assert result["value"] > 0 and result["client_us_per_call"] > 0
    # coalesced: far fewer script calls than calls (one a batch), at least one
    assert 1 <= calls < 5_000 // 10


def test_a_script_call_that_fails_mid_run_fails_the_floor_instead_of_hanging_it(
        server: RedisProcess) -> None:
    redis_server = server  # a Redis of its own: its script cache is flushed
    import redis as redis_sync
    import redis.asyncio as redis_async

    async def run() -> None:
        client = redis_async.Redis.from_url(redis_server.url)
        floor = asyncio.ensure_future(concurrent_floor.floor(10_000_000, redis_server.url,
                                                             budget=60.0))
        try:
            # once the floor's calls are running, its script goes: the next
            # batch's EVALSHA answers NOSCRIPT, which every caller must get
            deadline = time.monotonic() + 10.0
            while int((await client.info("commandstats")).get(
                    "cmdstat_evalsha", {}).get("calls", 0)) < 3:
                assert not floor.done() and time.monotonic() < deadline
                await asyncio.sleep(0.001)
            await client.script_flush()
            with pytest.raises(redis_sync.exceptions.NoScriptError):
                await asyncio.wait_for(floor, timeout=30.0)
        finally:
            await client.aclose()

    asyncio.run(run())


def test_the_floor_without_redis_parks_and_wakes_every_call_with_no_io() -> None:
    result = asyncio.run(concurrent_floor.floor(5_000, None, budget=30.0))
    assert result["n"] == 5_000 and result["tasks"] == 100 and result["value"] > 0


def test_the_bench_records_both_floors_each_under_its_own_name_and_goes_on(
        server: RedisProcess, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    import lq_bench

    async def failing_with_redis(n: int, url: str | None,
                                 budget: float = 60.0) -> dict[str, Any]:
        if url is not None:
            raise ConnectionError("Redis went away")
        return {"value": 1234.0, "n": n}

    monkeypatch.setattr(concurrent_floor, "floor", failing_with_redis)
    args = argparse.Namespace(conc_n=100, conc_budget=1.0, url=server.url)  # (flushed after)
    asyncio.run(lq_bench.loop_floor("_uvloop", args))
    first, second = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert first["metric"] == "concurrent_floor_uvloop" and "Redis went away" in first["error"]
    assert second["metric"] == "concurrent_floor_bare_uvloop" and second["value"] == 1234.0


def summary(lq: dict[str, float], peers: dict[str, float | None]) -> dict[str, Any]:
    return {"summary": {
        "leasequeue": {metric: {"value": value} for metric, value in lq.items()},
        "peers": {name: {"version": "1", "enqueue_concurrent": {"value": value}}
                  for name, value in peers.items()}}}


def test_the_report_sets_ours_and_3x_the_best_peer_against_each_loops_floors() -> None:
    results = summary({"enqueue_concurrent": 200_000.0, "concurrent_floor": 400_000.0,
                       "concurrent_floor_bare": 500_000.0,
                       "enqueue_concurrent_uvloop": 250_000.0,
                       "concurrent_floor_uvloop": 600_000.0,
                       "concurrent_floor_bare_uvloop": 1_000_000.0},
                      {"bee-queue-node": 120_000.0, "bullmq-node": 40_000.0})
    rows = report.floor_rows(results)
    assert [row.loop for row in rows] == ["asyncio", "uvloop"]
    row = rows[0]
    assert (row.bare, row.mark, row.ours, row.best) == (500_000.0, 400_000.0, 200_000.0,
                                                         120_000.0)
    assert row.target == 360_000.0
    assert row.over_mark(row.ours) == pytest.approx(0.5)
    assert row.over_mark(row.target) == pytest.approx(0.9)  # 3 x 120k / 400k
    # a job every 5 us at 200k/s, 2 us of it parking and waking its caller
    assert row.beyond(row.ours) == pytest.approx(3.0)
    assert row.beyond(row.target) == pytest.approx(1e6 / 360_000 - 2.0)
    assert rows[1].over_mark(rows[1].ours) == pytest.approx(250 / 600)
    assert rows[1].beyond(rows[1].ours) == pytest.approx(3.0)  # 4 us - 1 us
    out: list[str] = []
    report._floor_table(results, out)
    assert out[0].startswith("## 100 tasks against the event loop's own floor")
    assert "| asyncio | 500,000 | 400,000 | 200,000 | 360,000 | 0.50 | 0.90 | 3.00 | 0.78 |" in out
    assert "| uvloop | 1,000,000 | 600,000 | 250,000 | 360,000 | 0.42 | 0.60 | 3.00 | 1.78 |" in out


def test_a_target_above_park_and_wake_alone_leaves_a_job_less_than_nothing() -> None:
    results = summary({"enqueue_concurrent": 100_000.0, "concurrent_floor_bare": 200_000.0},
                      {"bee-queue-node": 100_000.0})
    (row,) = report.floor_rows(results)
    assert row.mark is None and row.over_mark(row.ours) is None
    assert row.beyond(row.target) == pytest.approx(1e6 / 300_000 - 5.0)  # < 0
    out: list[str] = []
    report._floor_table(results, out)
    assert "| asyncio | 200,000 | – | 100,000 | 300,000 | – | – | 5.00 | -1.67 |" in out


def test_a_run_from_before_the_floor_has_no_rows_and_no_section() -> None:
    results = summary({"enqueue_concurrent": 200_000.0}, {"bee-queue-node": 120_000.0})
    assert report.floor_rows(results) == []
    out: list[str] = []
    report._floor_table(results, out)
    assert out == []
    assert standing.floor_band([results]) == []


def test_the_standing_bands_the_floors_over_the_runs_that_measured_them() -> None:
    runs = [summary({"enqueue_concurrent": ours, "concurrent_floor": 400_000.0},
                    {"bee-queue-node": peer})
            for ours, peer in ((200_000.0, 120_000.0), (160_000.0, 100_000.0),
                               (240_000.0, 140_000.0))]
    runs.append(summary({"enqueue_concurrent": 200_000.0, "concurrent_floor": 400_000.0,
                         "concurrent_floor_bare": 500_000.0}, {"bee-queue-node": 100_000.0}))
    runs.append(summary({"enqueue_concurrent": 1.0}, {"bee-queue-node": 1.0}))  # no floor
    lines = standing.floor_band(runs)
    assert lines == [
        "100 tasks on asyncio's loop against its floor with one empty script call a batch, "
        "4 runs: leasequeue ÷ floor 0.40-0.60 (median 0.50); 3× the best peer ÷ floor "
        "0.75-1.05 (median 0.82)",
        "100 tasks on asyncio's loop against park and wake alone, 1 run: µs a job beyond "
        "it, leasequeue 3.00-3.00 (median 3.00); at 3× the best peer 1.33-1.33 (median 1.33)",
        ""]


def test_the_standing_bands_hosts_by_one_client_s_round_trip() -> None:
    """--by trip: a run's kind of host and the band of its median
    evalsha_c1 round trip (1 / the rate over its reps), "?" without one."""

    def run(cpu: str, *rates: float) -> dict[str, Any]:
        lines = [[{"metric": "evalsha_c1", "value": rate},
                  {"metric": "evalsha_c50", "value": 1.0}] for rate in rates]
        return {"machine": {"cpu": cpu}, "ceiling": {"runs": [{"lines": ls} for ls in lines]}}

    amd, intel = "AMD EPYC 7B13", "Intel(R) Xeon(R) Processor"
    assert standing.round_trip_us(run(amd, 5_000.0, 8_000.0, 6_000.0)) == 1e6 / 6_000.0
    assert [standing.trip(r) for r in (
        run(amd, 6_000.0), run(amd, 15_000.0), run(intel, 40_000.0), run(intel, 25_000.0),
        run(intel, 11_111.0), run(intel))] == [
        "AMD EPYC, trip ≥ 90 µs", "AMD EPYC, trip 40-90 µs", "Intel Xeon, trip < 40 µs",
        "Intel Xeon, trip 40-90 µs", "Intel Xeon, trip ≥ 90 µs", "Intel Xeon, trip ?"]


def test_the_standing_bands_hosts_by_their_park_and_wake_floor() -> None:
    """--by floor: a run's kind of host and the band of its park-and-wake
    floor on asyncio's loop (concurrent_floor_bare, calls/s), at the
    bands' edges too; "?" for a run from before it was measured."""

    def run(cpu: str, calls: float | None) -> dict[str, Any]:
        lq = {} if calls is None else {"concurrent_floor_bare": {"value": calls}}
        return {"machine": {"cpu": cpu}, "summary": {"leasequeue": lq}}

    amd, intel = "AMD EPYC 7B13", "Intel(R) Xeon(R) Processor"
    assert standing.park_and_wake(run(amd, 631_620.0)) == 631_620.0
    assert standing.park_and_wake(run(amd, None)) is None
    assert [standing.floor(r) for r in (
        run(amd, 631_620.0), run(amd, 700_000.0), run(intel, 734_000.0),
        run(intel, 799_999.0), run(amd, 800_000.0), run(amd, 875_000.0),
        run(intel, None))] == [
        "AMD EPYC, floor < 700k", "AMD EPYC, floor 700k-800k", "Intel Xeon, floor 700k-800k",
        "Intel Xeon, floor 700k-800k", "AMD EPYC, floor ≥ 800k", "AMD EPYC, floor ≥ 800k",
        "Intel Xeon, floor ?"]


def test_the_standing_by_floor_gives_each_group_s_rates_behind_the_100_task_ratio() -> None:
    """--by floor: per group, ours and the best peer's 100-task rates and
    the park-and-wake floor, lowest-highest ("–" where no run has one)."""
    runs = [summary({"enqueue_concurrent": ours, "concurrent_floor_bare": floor},
                    {"bee-queue-node": peer, "bullmq-node": 10_000.0})
            for ours, peer, floor in ((250_000.0, 95_000.0, 630_000.0),
                                      (265_000.0, 82_000.0, 560_000.0),
                                      (360_000.0, 117_000.0, 860_000.0))]
    runs.append(summary({"enqueue_concurrent": 180_000.0}, {"bee-queue-node": 90_000.0}))
    for run in runs:
        run["machine"] = {"cpu": "AMD EPYC 7B13"}
    groups = sorted({standing.floor(r) for r in runs})
    assert standing.tasks_rates(runs, groups, standing.floor) == [
        "AMD EPYC, floor < 700k: 100 tasks, ours 250,000-265,000 jobs/s, the best peer's "
        "82,000-95,000; park and wake 560,000-630,000 calls/s",
        "AMD EPYC, floor ?: 100 tasks, ours 180,000-180,000 jobs/s, the best peer's "
        "90,000-90,000; park and wake – calls/s",
        "AMD EPYC, floor ≥ 800k: 100 tasks, ours 360,000-360,000 jobs/s, the best peer's "
        "117,000-117,000; park and wake 860,000-860,000 calls/s",
        ""]

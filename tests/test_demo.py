"""`leasequeue demo` is the first thing a newcomer runs: it must end with
every healthy job succeeded and only the poison job dead (finding 13: once
in about 25 runs a healthy job that shared a worker with the poison job on
each of its crashes was buried too). Three runs here; fifty in the slow run."""

from __future__ import annotations

import os

import pytest

from leasequeue.demo import run_demo

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("run", range(3))
async def test_the_demo_loses_no_healthy_job(run: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run_demo(url=f"memory://demo-test-{run}", jobs=120) == 0
    out = capsys.readouterr().out
    assert "dead 1," in out and "lost 0" in out


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_the_demo_fifty_times_in_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    runs = int(os.environ.get("LQ_DEMO_RUNS", "50"))
    for run in range(runs):
        assert await run_demo(url=f"memory://demo-slow-{run}") == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "succeeded 300/300, dead 1," in out, out

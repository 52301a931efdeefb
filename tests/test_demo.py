"""`leasequeue demo` is the first thing a newcomer runs: it must end with
every healthy job succeeded and only the poison job dead (finding 13: once
in about 25 runs a healthy job that shared a worker with the poison job on
each of its crashes was buried too), a crash whose jobs are recovered by
another worker (not by the one killed), a short summary, and no log line in
the display. Three in-process runs and one with real worker processes
killed by SIGKILL; fifty in-process runs in the slow run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from leasequeue.demo import run_demo
from tests.harness.redis_proc import RedisProcess

pytestmark = pytest.mark.anyio


def summary(out: str) -> dict[str, str]:
    """The summary's lines by their first word after ok/FAIL."""
    tail = out.split("\nSummary\n", 1)[1]
    lines = [x.strip() for x in tail.splitlines() if x.strip()]
    return {x.split()[1]: x for x in lines}


def check_display(out: str, log_file: Path) -> None:
    # no JSON log line in the display; they are all in the log file
    assert not [x for x in out.splitlines() if x.lstrip("\r").startswith("{")], out
    logged = [json.loads(x) for x in log_file.read_text().splitlines() if x.startswith("{")]
    assert any(x.get("msg") == "worker started" or "worker" in x.get("msg", "") for x in logged)
    assert f"workers' log lines: {log_file}" in out


def check_poison(line: str, out: str) -> None:
    """3 attempts, each ended by a kill: the poison job's own kills, and the
    crash scene's when the claim that gave the job to the victim landed
    between that scene's look at the leases and its kill (a CI run at
    8057e4e; 1 of 25 local runs). A kill before the start mark landed is an
    infrastructure failure, not an attempt: then one more."""
    found = re.match(r"ok   poison job: killed (\d) worker\(s\)(?: \(its run on (worker-\d+) "
                     r"ended when the crash scene killed that worker\))?, then dead "
                     r"\(lease-expired\) after 3 attempts", line)
    assert found, out
    kills, crashed = int(found.group(1)), found.group(2) is not None
    assert 3 <= kills + crashed <= 4 and kills >= 2, out


@pytest.mark.parametrize("run", range(3))
async def test_the_in_process_demo_loses_no_healthy_job(run: int, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    log_file = tmp_path / "demo.log"
    code = await run_demo(url=f"memory://demo-test-{run}", jobs=120, log_file=str(log_file))
    out = capsys.readouterr().out
    assert code == 0, out
    lines = summary(out)
    assert lines["120"].startswith("ok   120 healthy jobs: 120 succeeded, 0 lost"), out
    crash = re.search(r"ok   crash: (worker-\d+) killed holding (\d+) job\(s\); (\d+) handed "
                      r"back by the reaper and run again by (.+)$", lines["crash:"])
    assert crash, out
    victim, held, reaped, by = crash.groups()
    assert held == reaped and int(held) > 0 and victim not in by.split(", "), out
    check_poison(lines["poison"], out)
    assert lines["schedule"].startswith("ok   schedule 'heartbeat'"), out
    assert "task cancelled" in out and "Give --url redis://" in out  # says what it simulates
    check_display(out, log_file)


async def test_the_crash_scene_lists_what_the_victim_held_when_its_task_ends_late(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI run at 861f261, under heavy hypervisor steal: the killed task
    ended so late that the reaper had handed back everything it held, and
    the scene, listing the victim's leases only then, found none and failed.
    The CI run of 09c9a99: the victim had acked every job of the scene's
    look before the kill, what it claimed after that look the reaper took
    during the late end, and the scene, listing the look's jobs and the
    leases left, found nothing. Here the victim's task "ends" only once the
    reaper has taken all of its leases: the scene must still list, and see
    recovered, what it held (from the reaper's events, whatever its look
    before the kill saw)."""
    import anyio

    from leasequeue import demo_workers

    ended_late = demo_workers.TaskWorkers.gone

    async def gone(self: demo_workers.TaskWorkers, worker_id: str) -> None:
        await ended_late(self, worker_id)
        app = self.apps[-1]  # the replacement's: the victim's App is cut off
        with anyio.fail_after(30):
            while True:
                records, _ = await app.jobs(demo_workers.QUEUE, "leased", count=1000)
                if not any(r.worker == worker_id for r in records):
                    return
                await anyio.sleep(0.05)

    monkeypatch.setattr(demo_workers.TaskWorkers, "gone", gone)
    log_file = tmp_path / "demo.log"
    code = await run_demo(url="memory://demo-test-late", jobs=120, log_file=str(log_file))
    out = capsys.readouterr().out
    assert code == 0, out
    crash = re.search(r"ok   crash: (worker-\d+) killed holding (\d+) job\(s\); (\d+) handed "
                      r"back by the reaper", summary(out)["crash:"])
    assert crash and crash.group(2) == crash.group(3) and int(crash.group(2)) > 0, out


@pytest.mark.timeout(240)
async def test_the_demo_on_redis_sigkills_a_worker_process(redis_server: RedisProcess,
                                                           tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    log_file = tmp_path / "demo.log"
    code = await run_demo(url=redis_server.url, jobs=150, log_file=str(log_file))
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"\*\* killed worker-\d+ \(SIGKILL\) while it held [1-9]", out), out
    lines = summary(out)
    assert lines["150"].startswith("ok   150 healthy jobs: 150 succeeded, 0 lost"), out
    victim, by = re.search(r"crash: (worker-\d+) killed .* run again by (.+)$",
                           lines["crash:"]).groups()  # type: ignore[union-attr]
    assert lines["crash:"].startswith("ok") and victim not in by.split(", "), out
    check_poison(lines["poison"], out)
    check_display(out, log_file)
    assert len(summary(out)) <= 6  # read in five seconds


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_the_demo_fifty_times_in_a_row(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    runs = int(os.environ.get("LQ_DEMO_RUNS", "50"))
    for run in range(runs):
        assert await run_demo(url=f"memory://demo-slow-{run}",
                              log_file=str(tmp_path / "demo.log")) == 0, capsys.readouterr().out
        out = capsys.readouterr().out
        assert "300 healthy jobs: 300 succeeded, 0 lost" in out, out

"""Invariant 3 with real processes: workers whose wall clocks are an hour
ahead and an hour behind work side by side with a correct one. Every job
outlives its lease, so only renewals keep it; no lease may be reaped early
(every job runs exactly once, never reaped) and every job completes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from leasequeue import JobRequest
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.harness.reliability import (
    RELIABILITY_APP,
    counters,
    enqueue,
    executions,
    records,
    set_sizes,
)

HOUR = 3600
SKEWS = {"ahead": HOUR, "behind": -HOUR, "true": 0}
JOBS = 18  # two waves over three workers with three slots each
JOB_S = 2.0  # > the 1 s lease


@pytest.fixture
def workers(server: RedisProcess, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(server.url, "skew", tmp_path) as procs:
        yield procs


def test_skewed_workers_behave_like_the_others(server: RedisProcess,
                                               workers: WorkerProcs) -> None:
    r = redis_sync.Redis(port=server.port)
    enqueue(server.url, "skew", [JobRequest("work", {"seconds": JOB_S}, job_id=f"k{i}",
                                            queue="default", max_attempts=5)
                                 for i in range(JOBS)])
    for wid, skew in SKEWS.items():
        workers.start(wid, "--concurrency", "3", "--lease", "1", "--shutdown-timeout", "2",
                      app=RELIABILITY_APP, env={"LQ_CLOCK_SKEW": str(skew)})
    wait_for(lambda: set_sizes(r, "skew")["done"] == JOBS, timeout=40,
             what="every job to succeed")
    workers.terminate_all()

    rows = executions(r, "skew")
    # the skew was really in force: each worker's wall clock, as it recorded it
    # at the start of a run, against the server clock at the end of the test
    sec, usec = r.time()
    server_now_ms = sec * 1000 + usec // 1000
    for wid, skew in SKEWS.items():
        seen = [e.client_ms - server_now_ms for e in rows if e.worker == wid]
        assert seen, f"worker {wid} ran no job"
        assert all(abs(offset - skew * 1000) < 60_000 for offset in seen), (wid, seen[:3])

    starts = Counter(e.job for e in rows if e.kind == "start")
    assert starts == Counter({f"k{i}": 1 for i in range(JOBS)}), (
        "a job ran twice: a lease was reaped early")
    ran_under = {e.job: e.token for e in rows if e.kind == "start"}
    stats = counters(r, "skew")
    assert stats.get("reaped", 0) == 0 and stats["succeeded"] == JOBS, stats
    recs = records(r, "skew")
    assert all((rec["state"], rec["attempt"], rec["token"]) == ("succeeded", 1, ran_under[job])
               for job, rec in recs.items()), recs
    print("\nclock skew: " + ", ".join(
        f"{wid} ({skew:+d}s) ran {sum(1 for e in rows if e.worker == wid and e.kind == 'start')}"
        for wid, skew in SKEWS.items()))

"""Redis goes away and comes back (a restart for an upgrade: SIGTERM; a crash:
SIGKILL, with the AOF fsynced on every write) while two worker processes run:
every job completes and nothing is lost; the workers log the outage without a
tight reconnect loop; the scripts load again after NOSCRIPT, because a
restarted server starts with an empty script cache."""

from __future__ import annotations

import time
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
    log_lines,
    records,
    script_names_by_sha,
    set_sizes,
)

JOBS = 400
# longer than the executor's settling retries (5 tries, 3.1 s in all), so the
# claimer meets the outage too once its slots are free again
OUTAGE_S = 5.0
MAX_CLAIM_WARNINGS_PER_S = 15.0
MAX_WARNINGS_PER_S = 40.0  # every warning of a worker, any part


@pytest.fixture
def server() -> Iterator[RedisProcess]:
    with RedisProcess(extra=["--appendonly", "yes", "--appendfsync", "always"]) as proc:
        yield proc


@pytest.fixture
def workers(server: RedisProcess, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(server.url, "restart", tmp_path) as procs:
        yield procs


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_redis_restart_loses_nothing(server: RedisProcess, workers: WorkerProcs,
                                     tmp_path: Path, how: str) -> None:
    r = redis_sync.Redis(port=server.port, socket_timeout=5)
    assert r.config_get("appendonly")["appendonly"] == "yes"  # the extra args won
    enqueue(server.url, "restart",
            [JobRequest("work", {"seconds": 0.05}, job_id=f"j{i}", queue="default",
                        max_attempts=20) for i in range(JOBS)])
    for wid in ("a", "b"):
        workers.start(wid, "--concurrency", "4", "--lease", "2", "--shutdown-timeout", "2",
                      app=RELIABILITY_APP)
    # stop Redis in the middle of the run
    wait_for(lambda: set_sizes(r, "restart")["done"] >= JOBS // 5, timeout=30,
             what="a fifth of the jobs to finish")
    r.close()
    if how == "sigterm":
        server.stop()  # Redis flushes the AOF and exits
    else:
        server.kill()  # a crash: only what was fsynced survives (appendfsync always)
    down_at = time.monotonic()
    time.sleep(OUTAGE_S)  # the outage itself: the workers must ride it out
    server.start()
    outage = time.monotonic() - down_at
    r = redis_sync.Redis(port=server.port, socket_timeout=5)
    sha_of = {name: sha for sha, name in script_names_by_sha().items()}

    wait_for(lambda: set_sizes(r, "restart")["done"] == JOBS, timeout=60,
             what="every job to succeed after the restart")
    workers.terminate_all()

    recs = records(r, "restart")
    assert len(recs) == JOBS and {rec["state"] for rec in recs.values()} == {"succeeded"}
    assert set_sizes(r, "restart") == {"ready": 0, "scheduled": 0, "leases": 0, "dead": 0,
                                       "done": JOBS}
    assert counters(r, "restart")["succeeded"] == JOBS  # no completion counted twice
    # every job's accepted run is one that was recorded
    started = {(e.job, e.token) for e in executions(r, "restart") if e.kind == "start"}
    assert all((job, rec["token"]) in started for job, rec in recs.items())

    # the restarted server had no scripts: the workers hit NOSCRIPT and loaded them again
    errors = r.info("errorstats")
    assert errors.get("errorstat_NOSCRIPT", {}).get("count", 0) >= 1, errors
    loaded = dict(zip(["claim", "ack", "renew", "reap"],
                      r.script_exists(*(sha_of[n] for n in ("claim", "ack", "renew", "reap"))),
                      strict=True))
    assert all(loaded.values()), loaded

    # the outage is in the logs, at a bounded rate (no tight reconnect loop)
    for wid in ("a", "b"):
        log = tmp_path / f"{wid}.log"
        claims = log_lines(log, "claim failed")
        warnings = [e for e in log_lines(log, "") if e["level"] == "warning"]
        kinds = Counter(e["msg"] for e in warnings)
        print(f"\nworker {wid}: {len(claims)} 'claim failed' lines over a {outage:.1f}s outage "
              f"({len(claims) / outage:.1f}/s); all warnings: {dict(kinds)}")
        assert claims, f"worker {wid} logged no claim failure during the outage"
        assert len(claims) / outage <= MAX_CLAIM_WARNINGS_PER_S, claims[:20]
        assert len(warnings) / outage <= MAX_WARNINGS_PER_S, kinds

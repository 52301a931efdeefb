"""Redis goes away and comes back (a restart for an upgrade: SIGTERM; a crash:
SIGKILL, with the AOF fsynced on every write) while two worker processes run:
every job completes and nothing is lost; the workers log the outage without a
tight reconnect loop; the scripts load again after NOSCRIPT, because a
restarted server starts with an empty script cache.

Runs are counted per job. At-least-once allows a job to run twice here, and
the test bounds exactly when: a job ran at most twice; a second run only
follows a first run that started before Redis went down (its acknowledgement
was cut off by the outage) and did not finish the job; the second run started
after the restart under a higher token and is the one the record kept; and
no more jobs ran twice than the two workers can have had in flight."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
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
CONCURRENCY = 4
EXEC_SUFFIX = "test:executions"  # tests/harness/apps/reliability_app.py EXEC_KEY
# longer than the executor's settling retries (5 tries, 3.1 s in all), so the
# claimer meets the outage too once its slots are free again
OUTAGE_S = 5.0
# claims back off 0.1 s doubling to 2 s: over a 5 s outage that is about 5
# failures (0.1+0.2+0.4+0.8+1.6+2), 1 a second; 2 a second leaves room for a
# failure logged on each side of the outage window
MAX_CLAIM_WARNINGS_PER_S = 2.0
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
        workers.start(wid, "--concurrency", str(CONCURRENCY), "--lease", "2",
                      "--shutdown-timeout", "2", app=RELIABILITY_APP)
    # stop Redis in the middle of the run
    wait_for(lambda: set_sizes(r, "restart")["done"] >= JOBS // 5, timeout=30,
             what="a fifth of the jobs to finish")
    # freeze writes, so the executions recorded before the outage are exactly
    # the first `before` entries of the list (the AOF keeps them in order)
    r.client_pause(30_000, all=False)
    before = int(r.llen(f"restart:{EXEC_SUFFIX}"))
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
    rows = executions(r, "restart")
    started = {(e.job, e.token) for e in rows if e.kind == "start"}
    assert all((job, rec["token"]) in started for job, rec in recs.items())

    # runs per job: a second run only where the outage cut off the first one
    starts: dict[str, list[tuple[int, int]]] = defaultdict(list)  # job -> (index, token)
    for index, e in enumerate(rows):
        if e.kind == "start":
            starts[e.job].append((index, e.token))
    twice = {job: runs for job, runs in starts.items() if len(runs) > 1}
    for job, runs in twice.items():
        assert len(runs) == 2, (job, runs)  # never three runs
        (first_at, first_token), (second_at, second_token) = runs
        assert first_at < before <= second_at, (job, runs, before)
        assert second_token > first_token and recs[job]["token"] == second_token, (job, runs)
    in_flight_max = 2 * CONCURRENCY  # two workers, each running at most CONCURRENCY
    print(f"\nrestart ({how}): {len(twice)} of {JOBS} jobs ran twice "
          f"(bound {in_flight_max}), every one a run cut off by the outage")
    assert len(twice) <= in_flight_max, twice

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

"""The claim behind an idle wait, with real worker processes: a worker that
freezes while it waits (SIGSTOP: its connection stays open, so Redis still
serves its BLPOP and runs the claim behind it) holds the job that claim took
for one lease, and no attempt is charged for it; another worker's reaper
hands it back and the job runs once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from leasequeue import JobRequest
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.harness.reliability import RELIABILITY_APP, enqueue, executions, records


@pytest.fixture
def workers(redis_server: RedisProcess, prefix: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(redis_server.url, prefix, tmp_path) as procs:
        yield procs


def _blocked_in_blpop(r: redis_sync.Redis) -> int:
    return sum(1 for c in r.client_list() if c.get("cmd") == "blpop")


def test_a_worker_frozen_in_its_wait_is_charged_no_attempt_for_the_job_it_took(
        workers: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str,
        redis_server: RedisProcess) -> None:
    frozen = workers.start("frozen", "--concurrency", "2", "--lease", "2", app=RELIABILITY_APP)
    wait_for(lambda: _blocked_in_blpop(sync_redis) == 1, timeout=20,
             what="the worker to block in its idle wait")
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        enqueue(redis_server.url, prefix, [JobRequest("work", job_id="j1")])
        # its wait is served by the token and the claim behind it leases the
        # job to the frozen worker, unstarted
        wait_for(lambda: records(sync_redis, prefix).get("j1", {}).get("state") == "leased",
                 timeout=10, what="the claim behind the frozen worker's wait to lease j1")
        assert records(sync_redis, prefix)["j1"]["started"] == 0
        workers.start("other", "--concurrency", "2", "--lease", "2",
                      "--reap-interval", "0.5", app=RELIABILITY_APP)
        wait_for(lambda: records(sync_redis, prefix)["j1"]["state"] == "succeeded",
                 timeout=30, what="j1 to run on the other worker after the lease")
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    rec = records(sync_redis, prefix)["j1"]
    assert rec["attempt"] == 1  # the frozen worker's lease cost no attempt
    runs = [e for e in executions(sync_redis, prefix) if e.kind == "start"]
    assert [(e.job, e.worker) for e in runs] == [("j1", "other")]

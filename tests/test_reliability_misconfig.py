"""A Redis that may evict keys (maxmemory with an evicting policy) could drop
leases and jobs silently, so a CLI worker refuses to start on it: it exits
non-zero with an error that names the policy and the fix. With
``--allow-eviction`` it runs (and says the risk in its log)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

from leasequeue import JobRequest
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.harness.reliability import RELIABILITY_APP, enqueue, log_lines, records


@pytest.fixture(params=["allkeys-lru", "volatile-ttl"])
def server(request: pytest.FixtureRequest) -> Iterator[RedisProcess]:
    with RedisProcess(extra=["--maxmemory", "100mb", "--maxmemory-policy", request.param]) as proc:
        yield proc


@pytest.fixture
def workers(server: RedisProcess, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(server.url, "evict", tmp_path) as procs:
        yield procs


def test_worker_refuses_an_evicting_redis(server: RedisProcess, workers: WorkerProcs,
                                          tmp_path: Path) -> None:
    policy: Any = redis_sync.Redis(port=server.port, decode_responses=True).config_get(
        "maxmemory-policy")
    name: str = policy["maxmemory-policy"]
    proc = workers.start("strict", "--lease", "1", app=RELIABILITY_APP)
    try:
        code = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the worker started on an evicting Redis instead of exiting")
    output = (tmp_path / "strict.log").read_text()
    assert code == 1, output
    assert "error:" in output and name in output and "noeviction" in output, output
    assert "allow_eviction" in output or "allow-eviction" in output, output


def test_worker_runs_with_the_opt_out(server: RedisProcess, workers: WorkerProcs,
                                      tmp_path: Path) -> None:
    r = redis_sync.Redis(port=server.port)
    proc = workers.start("lenient", "--lease", "1", "--allow-eviction", "--shutdown-timeout", "2",
                         app=RELIABILITY_APP)
    enqueue(server.url, "evict", [JobRequest("work", job_id="e1", queue="default")])
    wait_for(lambda: records(r, "evict")["e1"]["state"] == "succeeded", timeout=20,
             what="the job to run on the opted-out worker")
    assert log_lines(tmp_path / "lenient.log", "maxmemory-policy may evict keys")
    workers.terminate_all()
    assert proc.returncode == 0

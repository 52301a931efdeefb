"""A worker process killed with SIGKILL mid-job loses nothing: its jobs come
back after the lease and another worker completes them. Every execution is
recorded in Redis and counted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess


@pytest.fixture
def workers(redis_server: RedisProcess, prefix: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(redis_server.url, prefix, tmp_path) as procs:
        yield procs


def executions(r: redis_sync.Redis, prefix: str) -> list[tuple[str, str, int, str]]:
    rows = [x.decode().split() for x in r.lrange(f"{prefix}:test:executions", 0, -1)]
    return [(kind, job, int(token), worker) for kind, job, token, worker in rows]


def test_sigkill_mid_job_loses_nothing(workers: WorkerProcs, sync_redis: redis_sync.Redis,
                                       prefix: str, redis_server: RedisProcess) -> None:
    import anyio

    from leasequeue import App, JobRequest

    async def enqueue() -> None:
        app = App(redis_server.url, prefix=prefix)
        await app.enqueue_many([JobRequest("slow", {"seconds": 0.5}, job_id=f"j{i}")
                                for i in range(40)])
        await app.close()

    anyio.run(enqueue)
    workers.start("victim", "--concurrency", "4", "--lease", "2")
    # wait until the victim is in the middle of jobs, then kill it
    wait_for(lambda: any(w == "victim" and k == "start"
                         for k, _, _, w in executions(sync_redis, prefix)),
             timeout=20, what="victim to start a job")
    workers.kill("victim")
    # read after the kill: the victim may start more jobs until it dies
    held = {(job, tok) for k, job, tok, w in executions(sync_redis, prefix)
            if w == "victim" and k == "start"}
    workers.start("survivor", "--concurrency", "8", "--lease", "2")

    jobs_key = "{" + prefix + ":default}:done"
    wait_for(lambda: sync_redis.zcard(jobs_key) == 40, timeout=60,
             what="all 40 jobs to succeed")
    rows = executions(sync_redis, prefix)
    ended = Counter(job for k, job, _, _ in rows if k == "end")
    assert set(ended) == {f"j{i}" for i in range(40)}  # every job completed
    started = Counter(job for k, job, _, _ in rows if k == "start")
    interrupted = {job for job, tok in held
                   if ("end", job, tok, "victim") not in set(rows)}
    assert interrupted, "the victim was killed while holding jobs"
    for job, count in started.items():
        # a job ran more than once only when the victim was killed holding it
        assert count == (2 if job in interrupted else 1), (job, count)
    for job, victim_token in held:
        if job not in interrupted:
            continue
        survivor_runs = [tok for k, j, tok, w in rows if j == job and w == "survivor"]
        # fenced: the survivor's run holds a newer token than the victim's
        assert survivor_runs and min(survivor_runs) > victim_token
    leases = "{" + prefix + ":default}:leases"
    assert sync_redis.zcard(leases) == 0


def test_cli_worker_exits_after_sigterm_despite_a_thread_that_will_not_stop(
        workers: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str,
        redis_server: RedisProcess) -> None:
    """Finding 4: the CLI process waited behind an abandoned thread (18 s, or
    until a second signal). It now exits once shutdown and the stop grace are
    over, leaving the job's lease to lapse (it is not handed back to run twice)."""
    import time

    import anyio

    from leasequeue import App

    async def enqueue() -> None:
        app = App(redis_server.url, prefix=prefix)
        await app.enqueue("stubborn", {"seconds": 60}, job_id="t")
        await app.close()

    anyio.run(enqueue)
    proc = workers.start("w", "--shutdown-timeout", "0.5", "--lease", "5")
    wait_for(lambda: executions(sync_redis, prefix), timeout=20, what="the job to start")
    t0 = time.monotonic()
    workers.terminate("w")
    proc.wait(15)
    assert time.monotonic() - t0 < 5.0, "the worker waited for the thread"
    assert "left behind" in workers.log("w")
    record = sync_redis.hget("{" + prefix + ":default}:jobs", "t")
    assert record is not None and b"|leased|" in record  # its lease lapses on its own

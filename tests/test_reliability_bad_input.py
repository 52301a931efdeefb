"""Bad input a running worker meets in Redis: each is stopped with a typed
error or a dead letter with a precise reason, and the rest of the queue keeps
running; nothing is lost and nothing is retried in vain.

- an id in ``ready`` with no record, or whose record is in another state:
  skipped and counted (``stats().counters['garbage']``), never run;
- a record edited by hand into nonsense: dead with reason ``malformed`` when a
  claim (or a promotion) meets it, the raw value kept as evidence, and
  ``get_job`` raises ``MalformedJob``;
- a payload that is not an envelope: dead with reason ``bad-payload``;
- a job name no handler is registered under: dead with ``unknown-job`` at once;
- ``memory://`` in a worker process: an embedded store lives in one process, so
  a CLI worker on it can never see another process's jobs and must refuse."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.errors import MalformedJob
from leasequeue.store.record import parse_record
from tests.harness.redis_proc import env_with_path
from tests.helpers import eventually, make_due, plant_payload, worker_running

pytestmark = pytest.mark.anyio

Q = "default"
JOBS = 20


def register_ok(app: App) -> list[int]:
    ran: list[int] = []

    @app.job(max_attempts=3)
    async def ok(ctx: Context, i: int) -> None:
        ran.append(i)

    return ran


async def all_succeeded(app: App, ids: list[str]) -> bool:
    for job_id in ids:
        if (await app.get_job(job_id)).state != "succeeded":
            return False
    return True


async def test_garbage_in_ready_is_skipped_and_counted(real_app: App) -> None:
    app = real_app
    qk = app.keys(Q)
    ran = register_ok(app)
    await app.enqueue("ok", {"i": -1}, job_id="finished")
    async with worker_running(app, lease=2.0):
        await eventually(lambda: all_succeeded(app, ["finished"]), what="the first job")
        # an id with no record, and a finished job's id put back by hand: both
        # sit at the head of the line (lowest scores)
        await app.redis.zadd(qk.ready, {"ghost": 0, "finished": 1})
        await app.enqueue_many([JobRequest("ok", {"i": i}, job_id=f"g{i}")
                                for i in range(JOBS)])
        await eventually(lambda: all_succeeded(app, [f"g{i}" for i in range(JOBS)]),
                         what="the real jobs to succeed")
    stats = await app.stats(Q)
    assert stats.counters["garbage"] == 2, stats.counters
    assert sorted(ran) == list(range(-1, JOBS))  # the finished job did not run again
    assert await app.redis.zcard(qk.ready) == 0
    assert not await app.redis.hexists(qk.jobs, "ghost")  # no record was invented
    assert (await app.get_job("finished")).token == 1


async def test_malformed_record_is_dead_and_the_queue_runs_on(real_app: App) -> None:
    app = real_app
    qk = app.keys(Q)
    ran = register_ok(app)
    await app.enqueue_many([JobRequest("ok", {"i": i}, job_id=f"m{i}") for i in range(JOBS)])
    await app.enqueue("ok", {"i": 99}, job_id="later", delay=60)
    # one queued record and one scheduled record edited into nonsense
    await app.redis.hset(qk.jobs, "m3", b"junk")
    await app.redis.hset(qk.jobs, "later", b"1|scheduled|not|a|record")
    await make_due(app, Q, "later")
    async with worker_running(app):
        await eventually(lambda: all_succeeded(app, [f"m{i}" for i in range(JOBS) if i != 3]),
                         what="the other jobs to succeed")
        await eventually(lambda: _count_is(app.redis.zcard(qk.dead), 2),
                         what="both malformed records to be dead")
    assert sorted(ran) == [i for i in range(JOBS) if i != 3]
    dead: Any = await app.redis.zrange(qk.dead, 0, -1)
    assert sorted(x.decode() for x in dead) == ["later", "m3"]
    letters = {e["job"]: e for e in await app.dead_letters(Q)}
    assert letters["m3"]["reason"] == letters["later"]["reason"] == "malformed"
    assert await app.redis.hget(qk.jobs, "m3") == b"junk"  # kept as evidence
    for job_id in ("m3", "later"):
        with pytest.raises(MalformedJob):
            await app.get_job(job_id)
    stats = await app.stats(Q)
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 2)
    assert await app.purge_dead(Q) == 2  # and an operator can clear them


async def test_bad_payload_is_dead_not_retried(real_app: App) -> None:
    app = real_app
    ran = register_ok(app)
    await app.enqueue_many([JobRequest("ok", {"i": i}, job_id=f"b{i}") for i in range(3)])
    await plant_payload(app, app.keys(Q), "b1", b"\xc1 not msgpack")
    async with worker_running(app):
        await eventually(lambda: _count_is(app.redis.zcard(app.keys(Q).dead), 1),
                         what="b1 to be dead")
        await eventually(lambda: all_succeeded(app, ["b0", "b2"]), what="the others")
    # the record is sound (only the payload is not), so read it raw
    raw: Any = await app.redis.hget(app.keys(Q).jobs, "b1")
    rec = parse_record(raw)
    assert (rec["state"], rec["reason"], rec["attempt"]) == ("dead", "bad-payload", 1)
    assert rec["token"] >= 1
    with pytest.raises(MalformedJob):  # get_job cannot decode it: a typed error
        await app.get_job("b1")
    assert sorted(ran) == [0, 2]


async def test_unknown_job_is_dead_at_once(real_app: App) -> None:
    app = real_app
    ran = register_ok(app)
    await app.enqueue("nobody_handles_this", {"x": 1}, queue=Q, job_id="u", max_attempts=5)
    await app.enqueue("ok", {"i": 1}, job_id="k")
    async with worker_running(app):
        rec = await eventually(lambda: _state(app, "u", "dead"), what="u to be dead")
        await eventually(lambda: all_succeeded(app, ["k"]), what="k")
    # one claim, no retry although five attempts were allowed
    assert (rec.reason, rec.attempt, rec.token) == ("unknown-job", 1, 1)
    assert rec.error is not None and "nobody_handles_this" in rec.error
    assert (await app.dead_letters(Q))[0]["reason"] == "unknown-job"
    assert ran == [1]


async def _count_is(count: Awaitable[int], expected: int) -> bool:
    return await count == expected


async def _state(app: App, job_id: str, state: str) -> object:
    rec = await app.get_job(job_id)
    return rec if rec.state == state else None


def test_cli_worker_refuses_a_memory_url(tmp_path: Path) -> None:
    env = env_with_path()
    env.update(LQ_URL="memory://shared", LQ_PREFIX="mem")
    with (tmp_path / "worker.log").open("w+b") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "leasequeue.cli", "worker",
             "tests.harness.apps.reliability_app:app",
             "--worker-id", "mem", "--lease", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=8)  # it boots in well under a second
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
    assert code is not None, f"the worker kept running on memory:// ({output[-500:]})"
    assert code == 1 and "error:" in output and "memory://shared" in output, output[-500:]

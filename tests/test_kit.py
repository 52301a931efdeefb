"""The resilience kit: phase checkpoints, progress and sagas. Crash tests
SIGKILL real worker processes (tests/harness/apps/kit_app.py) and count every
side effect in Redis; the fencing, coalescing, bounds and retention tests run
an in-process worker (or the script itself) on a real redis-server."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis as redis_sync

from leasequeue import (
    App,
    CompensationFailed,
    Context,
    JobDead,
    LeaseLost,
    StateTooLarge,
    Step,
    run_saga,
)
from leasequeue.runtime.runstate import MAX_CHECKPOINT_BYTES, PROGRESS_INTERVAL
from leasequeue.store.specs import RunStateReply
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.helpers import (
    START_ALL,
    eventually,
    expire_lease,
    new_claim_id,
    ready_ids,
    worker_running,
)

KIT_APP = "tests.harness.apps.kit_app:app"
FAST = ("--concurrency", "2", "--lease", "2", "--reap-backoff-base", "0.1")


@pytest.fixture
def workers(redis_server: RedisProcess, prefix: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(redis_server.url, prefix, tmp_path) as procs:
        yield procs


def calls(r: redis_sync.Redis, prefix: str, job_id: str) -> list[tuple[str, int]]:
    """(what, token) of every recorded call of one job, in order."""
    rows = [x.decode().split() for x in r.lrange(f"{prefix}:test:calls", 0, -1)]
    return [(what, int(token)) for job, what, token in rows if job == job_id]


def enqueue(url: str, prefix: str, name: str, payload: dict[str, Any], job_id: str) -> None:
    async def go() -> None:
        async with App(url, prefix=prefix) as app:
            await app.enqueue(name, payload, job_id=job_id, queue="default")

    anyio.run(go)


def get_job(url: str, prefix: str, job_id: str) -> Any:
    async def go() -> Any:
        async with App(url, prefix=prefix) as app:
            return await app.get_job(job_id, "default")

    return anyio.run(go)


# -- crash tests: real worker processes, SIGKILL ----------------------------------


def test_a_three_phase_job_killed_after_phase_2_resumes_at_phase_3(
        workers: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str,
        redis_server: RedisProcess) -> None:
    enqueue(redis_server.url, prefix, "phases", {}, "p1")
    workers.start("victim", *FAST, app=KIT_APP)
    wait_for(lambda: ("checkpointed:phase2", ) in {(w,) for w, _ in
                                                   calls(sync_redis, prefix, "p1")},
             timeout=30, what="phase 2 to be checkpointed")
    workers.kill("victim")
    workers.start("survivor", *FAST, app=KIT_APP)
    wait_for(lambda: get_job(redis_server.url, prefix, "p1").state == "succeeded",
             timeout=30, what="the job to succeed")
    rows = calls(sync_redis, prefix, "p1")
    work = Counter(w for w, _ in rows if w.startswith("phase"))
    assert work == {"phase1": 1, "phase2": 1, "phase3": 1}  # phases 1-2 not redone
    first, second = sorted({t for _, t in rows})
    assert ("seen:-", first) in rows and ("seen:phase1,phase2", second) in rows
    assert ("phase3", second) in rows and ("phase3", first) not in rows
    record = get_job(redis_server.url, prefix, "p1")
    assert record.result == record.checkpoints
    assert record.checkpoints == {"phase1": {"sha": "sha-1", "token": first},
                                  "phase2": {"sha": "sha-2", "token": first},
                                  "phase3": {"sha": "sha-3", "token": second}}


def test_a_saga_killed_between_steps_resumes_and_completes(
        workers: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str,
        redis_server: RedisProcess) -> None:
    enqueue(redis_server.url, prefix, "order", {"mode": "kill-in-ship"}, "o1")
    workers.start("victim", *FAST, app=KIT_APP)
    wait_for(lambda: ("ship.do",) in {(w,) for w, _ in calls(sync_redis, prefix, "o1")},
             timeout=30, what="the saga to reach its last step")
    workers.kill("victim")
    workers.start("survivor", *FAST, app=KIT_APP)
    wait_for(lambda: get_job(redis_server.url, prefix, "o1").state == "succeeded",
             timeout=30, what="the saga to complete")
    done = Counter(w for w, _ in calls(sync_redis, prefix, "o1"))
    # done steps skipped on resume; the step the kill cut off ran again
    assert done == {"charge.do": 1, "reserve.do": 1, "ship.do": 2}
    assert sync_redis.smembers(f"{prefix}:test:applied:o1") == {b"charge", b"reserve", b"ship"}
    assert sync_redis.smembers(f"{prefix}:test:undone:o1") == set()
    saga = get_job(redis_server.url, prefix, "o1").saga
    assert saga["status"] == "completed"
    assert [(n, s) for n, s, _ in saga["steps"]] == [
        ("charge", "done"), ("reserve", "done"), ("ship", "done")]


def test_a_saga_killed_mid_compensation_ends_fully_compensated(
        workers: WorkerProcs, sync_redis: redis_sync.Redis, prefix: str,
        redis_server: RedisProcess) -> None:
    enqueue(redis_server.url, prefix, "order", {"mode": "fail-ship-kill-in-undo"}, "o2")
    workers.start("victim", *FAST, app=KIT_APP)
    wait_for(lambda: ("charge.undo",) in {(w,) for w, _ in calls(sync_redis, prefix, "o2")},
             timeout=30, what="the compensation to reach the first step")
    workers.kill("victim")
    workers.start("survivor", *FAST, app=KIT_APP)
    wait_for(lambda: get_job(redis_server.url, prefix, "o2").state == "dead",
             timeout=30, what="the saga to end compensated")
    record = get_job(redis_server.url, prefix, "o2")
    assert record.reason == "saga-compensated"
    assert "ship" in (record.error or "")
    ran = Counter(w for w, _ in calls(sync_redis, prefix, "o2"))
    # ship failed once; the compensation resumed: reserve's undo (recorded) not
    # repeated, charge's undo (cut off by the kill) tried again
    assert ran == {"charge.do": 1, "reserve.do": 1, "ship.do": 1, "reserve.undo": 1,
                   "charge.undo": 2}
    # in effect: nothing left applied, each compensation applied once
    assert sync_redis.smembers(f"{prefix}:test:applied:o2") == set()
    assert sync_redis.smembers(f"{prefix}:test:undone:o2") == {b"charge", b"reserve"}
    assert record.saga["status"] == "compensated"
    assert record.saga["failed"] == "ship"
    assert [(n, s) for n, s, _ in record.saga["steps"]] == [
        ("charge", "undone"), ("reserve", "undone")]


# -- fencing --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_stale_token_cannot_write_checkpoints_saga_or_progress(real_app: App) -> None:
    app, qk = real_app, real_app.keys("default")
    await app.enqueue("j", {}, job_id="a", queue="default")
    old = (await app.scripts.claim(qk, 1, 60_000, "w1", START_ALL, new_claim_id())).jobs[0]
    assert await app.scripts.runstate(qk, "a", old.token, "c", b"\x80", 1000) \
        is RunStateReply.SAVED
    # the lease expires and the job is claimed again: the first run is stale
    await expire_lease(app, "default", "a")
    await app.scripts.reap(qk, 10, 0, 0, {}, (3, 10))
    await eventually(lambda: ready_ids(app, qk), what="requeued")
    new = (await app.scripts.claim(qk, 1, 60_000, "w2", START_ALL, new_claim_id())).jobs[0]
    assert new.token > old.token
    before = await app.redis.hgetall(qk.runstate)
    for kind in ("c", "s", "p"):
        assert await app.scripts.runstate(qk, "a", old.token, kind, b"stale", 1000) \
            is RunStateReply.LOST
    assert await app.redis.hgetall(qk.runstate) == before  # nothing written
    assert await app.scripts.runstate(qk, "a", new.token, "c", b"\x81\xa1x\x01", 1000) \
        is RunStateReply.SAVED
    assert await app.scripts.runstate(qk, "a", new.token, "c", b"x" * 11, 10) \
        is RunStateReply.TOO_LARGE
    # a finished job takes no writes either
    await app.scripts.ack(qk, "succeeded", 60_000, [("a", new.token, b"", "")])
    assert await app.scripts.runstate(qk, "a", new.token, "p", b"1\x1f", 1000) \
        is RunStateReply.LOST


@pytest.mark.anyio
async def test_a_stale_run_gets_lease_lost_from_its_checkpoint(real_app: App) -> None:
    """A handler whose lease expired and was claimed elsewhere: its checkpoint
    raises LeaseLost in the handler, nothing is written, and the run stops."""
    app, qk = real_app, real_app.keys("default")
    go = anyio.Event()
    raised: list[str] = []

    @app.job(max_attempts=5)
    async def slow_phase(ctx: Context) -> None:
        await ctx.checkpoints()
        await go.wait()
        try:
            await ctx.checkpoint("late", 1)
        except LeaseLost:
            raised.append("checkpoint")
            raise

    await app.enqueue("slow_phase", {}, job_id="s1")
    # concurrency 1: the worker has no free slot to claim the requeued job back
    async with worker_running(app, lease=30.0, concurrency=1) as worker:
        await eventually(lambda: worker.table.running(), what="the run to start")
        held = worker.table.running()[0].job.token
        await expire_lease(app, "default", "s1")
        await app.scripts.reap(qk, 10, 0, 0, {}, (5, 10))
        # another worker's claim takes the job under a newer token
        taken = (await app.scripts.claim(qk, 1, 60_000, "thief", START_ALL,
                                         new_claim_id())).jobs
        assert taken and taken[0].token > held
        go.set()
        await eventually(lambda: raised == ["checkpoint"], what="LeaseLost in the handler")
        await eventually(lambda: not worker.table.running(), what="the run to stop")
    assert await app.redis.hget(qk.runstate, "c:s1") is None
    # the thief holds the job; the stale run settled nothing
    assert (await app.get_job("s1")).token == taken[0].token
    assert (await app.get_job("s1")).state == "leased"


# -- progress -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_ten_thousand_progress_calls_make_few_writes_and_the_last_lands(
        real_app: App) -> None:
    app, qk = real_app, real_app.keys("default")
    spans: list[float] = []

    @app.job()
    async def loop(ctx: Context) -> None:
        start = anyio.current_time()
        for i in range(10_000):
            await ctx.progress(i / 10_000, note=f"item {i}")
            if i % 500 == 0:
                await anyio.sleep(0.1)  # ~2 s of work, yielding now and then
        await ctx.progress(1.0, note="done")
        spans.append(anyio.current_time() - start)

    await app.enqueue("loop", {}, job_id="l1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "l1", "succeeded"), what="the loop")
    events = await app.redis.xrange(qk.events)
    writes = [e for _, e in events if e[b"job"] == b"l1" and e[b"event"] == b"progress"]
    # at most one write per interval over the run, plus the last value at the end
    bound = int(spans[0] / PROGRESS_INTERVAL) + 2
    assert 2 <= len(writes) <= bound, (len(writes), spans)
    assert writes[-1][b"detail"] == b"1 done"
    record = await app.get_job("l1")
    assert record.progress is not None
    assert (record.progress.fraction, record.progress.note) == (1.0, "done")
    assert record.progress.at_ms >= (record.claimed_ms or 0)


@pytest.mark.anyio
async def test_progress_lands_after_the_interval_while_the_handler_is_silent(
        real_app: App) -> None:
    """The last value of a burst lands when its interval is up, not only when
    the run ends."""
    app = real_app
    go = anyio.Event()

    @app.job()
    async def burst(ctx: Context) -> None:
        for i in range(100):
            await ctx.progress(i / 100)
        await go.wait()

    await app.enqueue("burst", {}, job_id="b1")
    async with worker_running(app):
        await eventually(lambda: _progress_is(app, "b1", 0.99), limit=5 * PROGRESS_INTERVAL,
                         what="the burst's last value")
        go.set()
        await eventually(lambda: _state_is(app, "b1", "succeeded"), what="the end")


@pytest.mark.anyio
async def test_bad_progress_values_are_refused(real_app: App) -> None:
    app = real_app
    errors: list[str] = []

    @app.job()
    async def bad(ctx: Context) -> None:
        for value in (-0.1, 1.5, float("nan"), "half"):
            try:
                await ctx.progress(value)  # type: ignore[arg-type]
            except ValueError as exc:
                errors.append(str(exc))

    await app.enqueue("bad", {}, job_id="x1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "x1", "succeeded"), what="the end")
    assert len(errors) == 4
    assert (await app.get_job("x1")).progress is None


# -- checkpoints: bounds and retention ------------------------------------------------------


@pytest.mark.anyio
async def test_checkpoints_over_the_bound_raise_and_the_earlier_ones_stand(
        real_app: App) -> None:
    app = real_app
    caught: list[StateTooLarge] = []

    @app.job()
    async def big(ctx: Context) -> None:
        await ctx.checkpoint("small", "ok")
        try:
            await ctx.checkpoint("huge", "x" * MAX_CHECKPOINT_BYTES)
        except StateTooLarge as exc:
            caught.append(exc)
        assert await ctx.checkpoints() == {"small": "ok"}

    await app.enqueue("big", {}, job_id="g1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "g1", "succeeded"), what="the end")
    assert len(caught) == 1 and caught[0].limit == MAX_CHECKPOINT_BYTES
    assert caught[0].size > MAX_CHECKPOINT_BYTES
    assert (await app.get_job("g1")).checkpoints == {"small": "ok"}


@pytest.mark.anyio
async def test_run_state_is_kept_across_replay_and_deleted_with_the_record(
        real_app: App) -> None:
    app, qk = real_app, real_app.keys("default")
    seen: list[dict[str, Any]] = []

    @app.job(max_attempts=1, retention=60)
    async def once(ctx: Context, fail: bool) -> None:
        seen.append(await ctx.checkpoints())
        await ctx.checkpoint("a", ctx.token)
        await ctx.progress(0.5)
        if fail:
            raise RuntimeError("boom")

    await app.enqueue("once", {"fail": True}, job_id="d1")
    await app.enqueue("once", {"fail": False}, job_id="k1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "d1", "dead"), what="d1 dead")
        await eventually(lambda: _state_is(app, "k1", "succeeded"), what="k1 done")
        assert await app.replay(["d1"]) == 1  # replay keeps the checkpoints
        await eventually(lambda: len(seen) == 3, what="the replayed run")
        await eventually(lambda: _state_is(app, "d1", "dead"), what="d1 dead again")
    assert {k for k in seen[2]} == {"a"}
    assert await app.redis.hlen(qk.runstate) == 4  # c: and p: of two jobs
    await app.redis.zadd(qk.done, {"k1": 1}, xx=True)  # k1's retention ran out
    assert await app.scripts.expire(qk, 10) == 1
    assert sorted(await app.redis.hkeys(qk.runstate)) == [b"c:d1", b"p:d1"]
    assert await app.purge_dead() == 1
    assert await app.redis.hlen(qk.runstate) == 0


# -- sagas: failures -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_compensation_that_keeps_failing_ends_dead_naming_the_step(
        real_app: App) -> None:
    app = real_app
    undo_calls: list[str] = []

    async def ok(_: dict[str, Any]) -> str:
        return "ok"

    async def fails(_: dict[str, Any]) -> str:
        raise RuntimeError("step b failed")

    async def undo_a(_: str) -> None:
        undo_calls.append("a")
        raise ConnectionError("the payment API is down")

    @app.job(max_attempts=3)
    async def doomed(ctx: Context) -> None:
        await run_saga(ctx, [Step("a", ok, undo_a), Step("b", fails, lambda _: None)],
                       undo_tries=3, undo_backoff=0.01)

    await app.enqueue("doomed", {}, job_id="c1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "c1", "dead"), what="dead")
    record = await app.get_job("c1")
    assert record.reason == "compensation-failed:a"
    assert record.attempt == 1  # dead at once: not retried into the void
    assert undo_calls == ["a", "a", "a"]
    assert record.saga is not None
    assert record.saga["status"] == "failed" and record.saga["undo_failed"] == "a"
    assert "payment API is down" in record.saga["undo_error"]
    with pytest.raises(JobDead) as dead:
        await app.wait("c1", timeout=1)
    assert dead.value.reason == "compensation-failed:a"
    assert CompensationFailed.__mro__[1].__name__ == "PermanentError"


@pytest.mark.anyio
async def test_saga_steps_must_be_named_once(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1)
    async def twice(ctx: Context) -> None:
        await run_saga(ctx, [Step("a", lambda r: 1, lambda x: None),
                             Step("a", lambda r: 2, lambda x: None)])

    await app.enqueue("twice", {}, job_id="t1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "t1", "dead"), what="dead")
    assert "unique" in ((await app.get_job("t1")).error or "")
    assert (await app.get_job("t1")).saga is None


# -- helpers ----------------------------------------------------------------------------------


async def _state_is(app: App, job_id: str, state: str) -> bool:
    return (await app.get_job(job_id)).state == state


async def _progress_is(app: App, job_id: str, fraction: float) -> bool:
    progress = (await app.get_job(job_id)).progress
    return progress is not None and progress.fraction == fraction


def test_the_cli_job_command_shows_progress_checkpoints_and_saga(
        redis_server: RedisProcess, prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import logging

    from leasequeue.cli import main

    async def seed() -> None:
        async with App(redis_server.url, prefix=prefix) as app:
            @app.job()
            async def shown(ctx: Context) -> None:
                await ctx.checkpoint("fetched", {"sha": "abc"})
                await run_saga(ctx, [Step("only", lambda r: "id-1", lambda x: None)])
                await ctx.progress(0.75, note="three quarters")

            await app.enqueue("shown", {}, job_id="v1")
            async with worker_running(app):
                await eventually(lambda: _state_is(app, "v1", "succeeded"), what="the end")

    anyio.run(seed)
    logger = logging.getLogger("leasequeue")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        capsys.readouterr()
        code = main(["job", "v1", "--url", redis_server.url, "--prefix", prefix])
        out = capsys.readouterr().out
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    job = json.loads(out)
    assert code == 0
    assert job["progress"]["fraction"] == 0.75 and job["progress"]["note"] == "three quarters"
    assert job["checkpoints"] == {"fetched": {"sha": "abc"}}
    assert job["saga"]["status"] == "completed"
    assert job["saga"]["steps"] == [["only", "done", "id-1"]]


@pytest.mark.anyio
async def test_a_sync_handler_uses_the_kit_through_from_thread(real_app: App) -> None:
    app = real_app

    @app.job()
    def threaded(ctx: Context) -> None:
        seen = anyio.from_thread.run(ctx.checkpoints)
        anyio.from_thread.run(ctx.checkpoint, "t", len(seen))
        anyio.from_thread.run(lambda: ctx.progress(0.5, "half"))

    await app.enqueue("threaded", {}, job_id="th1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "th1", "succeeded"), what="the end")
    record = await app.get_job("th1")
    assert record.checkpoints == {"t": 0}
    assert record.progress is not None and record.progress.note == "half"


@pytest.mark.anyio
async def test_a_cancel_mid_saga_compensates_the_done_steps(real_app: App) -> None:
    """No attempt follows a cancel, so the done steps are undone at once."""
    app = real_app
    effects: list[str] = []
    blocked = anyio.Event()

    async def charge(_: dict[str, Any]) -> str:
        effects.append("charge")
        return "ch_1"

    async def refund(charge_id: str) -> None:
        await anyio.sleep(0.05)  # async work inside the shielded compensation
        effects.append(f"refund {charge_id}")

    async def wait_forever(_: dict[str, Any]) -> None:
        blocked.set()
        await anyio.sleep_forever()

    @app.job(stop_grace=5)
    async def canceled_order(ctx: Context) -> None:
        await run_saga(ctx, [Step("charge", charge, refund),
                             Step("reserve", wait_forever, lambda _: None)])

    await app.enqueue("canceled_order", {}, job_id="co1")
    async with worker_running(app):
        await blocked.wait()
        assert await app.cancel("co1") == "cancel-requested"
        await eventually(lambda: _state_is(app, "co1", "canceled"), what="canceled")
    assert effects == ["charge", "refund ch_1"]
    saga = (await app.get_job("co1")).saga
    assert saga is not None and saga["status"] == "compensated"
    assert saga["error"] == "job canceled"
    assert [(n, s) for n, s, _ in saga["steps"]] == [("charge", "undone")]


@pytest.mark.anyio
async def test_overlapping_checkpoints_of_one_run_are_all_kept(real_app: App) -> None:
    app = real_app

    @app.job()
    async def fan_out(ctx: Context) -> None:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(ctx.checkpoint, f"part{i}", i)

    await app.enqueue("fan_out", {}, job_id="f1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "f1", "succeeded"), what="the end")
    assert (await app.get_job("f1")).checkpoints == {f"part{i}": i for i in range(20)}


@pytest.mark.anyio
async def test_a_replay_resumes_a_failed_compensation(real_app: App) -> None:
    """Dead with compensation-failed: fix the cause, replay, and the
    compensation goes on from the step that failed (the undone ones are not
    undone again)."""
    app = real_app
    undos: list[str] = []
    broken = [True]

    async def ok(_: dict[str, Any]) -> str:
        return "ok"

    async def fails(_: dict[str, Any]) -> str:
        raise RuntimeError("no")

    def undo(name: str) -> Any:
        async def run(_: str) -> None:
            undos.append(name)
            if name == "a" and broken[0]:
                raise ConnectionError("down")
        return run

    @app.job(max_attempts=1)
    async def fixable(ctx: Context) -> None:
        await run_saga(ctx, [Step("a", ok, undo("a")), Step("b", ok, undo("b")),
                             Step("c", fails, undo("c"))], undo_tries=1)

    await app.enqueue("fixable", {}, job_id="r1")
    async with worker_running(app):
        await eventually(lambda: _state_is(app, "r1", "dead"), what="dead")
        assert (await app.get_job("r1")).reason == "compensation-failed:a"
        broken[0] = False
        assert await app.replay(["r1"]) == 1
        await eventually(lambda: _reason_is(app, "r1", "saga-compensated"), what="compensated")
    assert undos == ["b", "a", "a"]
    saga = (await app.get_job("r1")).saga
    assert saga is not None and saga["status"] == "compensated"
    assert [(n, s) for n, s, _ in saga["steps"]] == [("a", "undone"), ("b", "undone")]


async def _reason_is(app: App, job_id: str, reason: str) -> bool:
    record = await app.get_job(job_id)
    return record.state == "dead" and record.reason == reason

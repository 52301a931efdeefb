"""Operator controls on a real redis-server: pause / resume a queue (atomic in
the claim script), wait for a result without polling, re-run a finished job,
list jobs by state with a cursor; and per-run logs (capture, caps, policies,
deleted with the record)."""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest
import redis as redis_sync

from leasequeue import (
    App,
    ConfigError,
    Context,
    JobCanceled,
    JobDead,
    JobNotFinished,
    JobNotFound,
    PermanentError,
    Timeout,
    codec,
)
from leasequeue.cli import main as cli_main
from tests.harness.redis_proc import RedisProcess
from tests.helpers import START_ALL, eventually, fail_job, new_claim_id, server_ms, worker_running

pytestmark = pytest.mark.anyio


async def _claim(app: App, queue: str = "default", count: int = 10) -> Any:
    return await app.scripts.claim(app.keys(queue), count, 30_000, "w1", START_ALL,
                                   new_claim_id())


# -- pause / resume ------------------------------------------------------------


async def test_pause_stops_new_claims_atomically_under_load(real_app: App) -> None:
    app = real_app
    started: list[str] = []

    @app.job(queue="busy")
    async def work(ctx: Context, n: int) -> int:
        started.append(ctx.job_id)
        await anyio.sleep(0.02)
        return n

    await app.enqueue_many([_req("work", {"n": i}, f"j{i}") for i in range(400)])
    async with worker_running(app, concurrency=8, queues=["busy"]):
        await eventually(lambda: len(started) >= 40, what="the worker is draining")
        await app.pause("busy")
        paused_at = await server_ms(app)  # every claim after this instant sees the flag
        assert await app.paused("busy")
        # the runs leased before the pause finish; nothing new is leased
        await eventually(lambda: _leased_is(app, "busy", 0), what="running jobs finish")
        stats = await app.stats("busy")
        assert stats.paused and stats.ready > 0
        ready_left = stats.ready
        # enqueue still works while paused
        await app.enqueue("work", {"n": -1}, job_id="late")
        done, cursor = [], None
        while True:
            page, cursor = await app.jobs("busy", "done", cursor, 100)
            done += page
            if cursor is None:
                break
        assert done and all(r.claimed_ms is not None and r.claimed_ms <= paused_at
                            for r in done)
        # no claim leases anything: the ready set keeps what it had (+ the late one)
        assert (await app.stats("busy")).ready == ready_left + 1
        assert (await _claim(app, "busy")).jobs == []
        await app.resume("busy")
        assert not await app.paused("busy")
        await eventually(lambda: _succeeded_is(app, "busy", 401), limit=60,
                         what="the queue drains after resume")
    assert not (await app.stats("busy")).paused


async def test_pause_of_a_sharded_queue_pauses_every_shard(redis_server: RedisProcess,
                                                           prefix: str) -> None:
    async with App(redis_server.url, prefix=prefix, queue_shards={"hot": 4}) as app:
        jobs = await app.enqueue_many([_req("x", None, f"s{i}", queue="hot") for i in range(40)])
        assert len(jobs) == 40
        await app.pause("hot")
        for shard in app.shards.physical("hot"):
            assert await app.redis.exists(app.keys(shard).paused)
            assert (await _claim(app, shard)).jobs == []
        assert (await app.stats("hot")).paused
        await app.resume("hot")
        got = sum([len((await _claim(app, shard, 100)).jobs)
                   for shard in app.shards.physical("hot")])
        assert got == 40


async def test_pause_of_an_unknown_queue_is_a_config_error_and_writes_nothing(
        real_app: App, prefix: str) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        await real_app.pause("nosuch")
    assert await real_app.redis.keys(f"*{prefix}*") == []
    with pytest.raises(ConfigError):
        await real_app.pause("bad name")

    @real_app.job(queue="declared")
    async def handler(ctx: Context) -> None:
        return None

    await real_app.pause("declared")  # registered on this App: it exists
    assert await real_app.paused("declared")


async def test_cli_pauses_and_resumes(real_app: App, redis_server: RedisProcess,
                                      prefix: str) -> None:
    await real_app.enqueue("x", job_id="a")
    base = ["--url", redis_server.url, "--prefix", prefix]
    assert await anyio.to_thread.run_sync(cli_main, ["queues", "pause", "default", *base]) == 0
    assert await real_app.paused("default")
    assert await anyio.to_thread.run_sync(cli_main, ["queues", "resume", "default", *base]) == 0
    assert not await real_app.paused("default")
    assert await anyio.to_thread.run_sync(cli_main, ["queues", "pause", "none", *base]) == 1


# -- wait ----------------------------------------------------------------------


async def test_wait_returns_within_milliseconds_of_the_ack(real_app: App,
                                                           redis_server: RedisProcess,
                                                           prefix: str) -> None:
    await real_app.enqueue("x", job_id="w")
    (job,) = (await _claim(real_app)).jobs
    qk = real_app.keys("default")
    woke: list[float] = []
    async with App(redis_server.url, prefix=prefix) as other:  # another client, as a process

        async def waiter() -> None:
            woke.append(await other.wait("w", timeout=10))
            woke.append(time.monotonic())

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await eventually(lambda: real_app.redis.zscore(qk.waiting, "w"),
                             what="the waiter registered")
            await anyio.sleep(0.05)  # let it block in BLPOP (it would also see the state)
            acked_at = time.monotonic()
            assert await real_app.scripts.ack(
                qk, "succeeded", 60_000, [("w", job.token, codec.encode_result(42), "")]) == [1]
    assert woke[0] == 42
    assert woke[1] - acked_at < 0.05, f"woke {1000 * (woke[1] - acked_at):.1f} ms after the ack"
    assert await real_app.redis.zcard(qk.waiting) == 0  # the ending unregistered it


async def test_wait_raises_for_dead_and_canceled_jobs(real_app: App) -> None:
    await real_app.enqueue_many([_req("x", None, "d"), _req("x", None, "c")])
    claimed = {j.id: j for j in (await _claim(real_app)).jobs}
    qk = real_app.keys("default")

    async def bury() -> None:
        await anyio.sleep(0.05)
        await fail_job(real_app, qk, "d", claimed["d"].token, "dead", "permanent",
                       "PermanentError: bad card", 0)

    async with anyio.create_task_group() as tg:
        tg.start_soon(bury)
        with pytest.raises(JobDead) as dead:
            await real_app.wait("d", timeout=10)
    assert dead.value.reason == "permanent" and dead.value.state == "dead"
    assert dead.value.error is not None and "bad card" in dead.value.error
    assert await real_app.cancel("c") == "cancel-requested"
    await real_app.scripts.release(qk, [("c", claimed["c"].token)], 0, "test")
    with pytest.raises(JobCanceled):
        await real_app.wait("c", timeout=1)


async def test_wait_times_out_and_a_finished_job_returns_at_once(app: App) -> None:
    await app.enqueue("x", job_id="slow")
    began = time.monotonic()
    with pytest.raises(Timeout):
        await app.wait("slow", timeout=0.3)
    assert 0.3 <= time.monotonic() - began < 2.0
    (job,) = (await _claim(app)).jobs
    await app.scripts.ack(app.keys("default"), "succeeded", 60_000,
                          [("slow", job.token, codec.encode_result({"ok": 1}), "")])
    began = time.monotonic()
    assert await app.wait("slow", timeout=5) == {"ok": 1}
    assert time.monotonic() - began < 0.5
    with pytest.raises(JobNotFound):
        await app.wait("never-enqueued", timeout=1)


async def test_wait_after_retention_is_job_not_found(real_app: App) -> None:
    await real_app.enqueue("x", job_id="gone")
    (job,) = (await _claim(real_app)).jobs

    async def ack_without_retention() -> None:
        await anyio.sleep(0.05)
        await real_app.scripts.ack(real_app.keys("default"), "succeeded", 0,
                                   [("gone", job.token, b"", "")])

    async with anyio.create_task_group() as tg:
        tg.start_soon(ack_without_retention)
        with pytest.raises(JobNotFound, match="gone"):
            await real_app.wait("gone", timeout=10)


async def test_wait_survives_a_dropped_connection(real_app: App,
                                                  sync_redis: redis_sync.Redis) -> None:
    await real_app.enqueue("x", job_id="r")
    (job,) = (await _claim(real_app)).jobs
    result: list[Any] = []
    qk = real_app.keys("default")

    async def waiter() -> None:
        result.append(await real_app.wait("r", timeout=20))

    def blocked_client() -> int | None:
        for c in sync_redis.client_list():
            if c.get("cmd") == "blpop" and str(c.get("flags", "")).find("b") >= 0:
                return int(c["id"])
        return None

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        client_id = await eventually(lambda: blocked_client(), what="the waiter blocks")
        sync_redis.client_kill_filter(_id=client_id)
        await real_app.scripts.ack(qk, "succeeded", 60_000,
                                   [("r", job.token, codec.encode_result("ok"), "")])
    assert result == ["ok"]


# -- rerun ---------------------------------------------------------------------


async def test_rerun_makes_a_new_job_linked_to_the_original(real_app: App,
                                                            redis_server: RedisProcess,
                                                            prefix: str) -> None:
    app = real_app
    runs: list[tuple[str, int, str]] = []

    @app.job(max_attempts=1)
    async def charge(ctx: Context, amount: int) -> int:
        runs.append((ctx.job_id, ctx.attempt, ctx.correlation_id))
        if amount < 0:
            raise PermanentError("negative")
        return amount

    await app.enqueue("charge", {"amount": 5}, job_id="ok", correlation_id="order-1")
    await app.enqueue("charge", {"amount": -1}, job_id="bad")
    async with worker_running(app):
        assert await app.wait("ok", timeout=10) == 5
        with pytest.raises(JobDead):
            await app.wait("bad", timeout=10)
        with pytest.raises(JobNotFinished):
            await app.enqueue("charge", {"amount": 1}, job_id="later", delay=60)
            await app.rerun("later")
        new_id = await app.rerun("ok")
        assert new_id == "ok:rerun:1"
        assert await app.wait(new_id, timeout=10) == 5
        again = await app.rerun("bad")
        with pytest.raises(JobDead):
            await app.wait(again, timeout=10)
    record = await app.get_job(new_id)
    assert record.rerun_of == "ok" and record.state == "succeeded"
    assert record.attempt == 1 and record.payload == {"amount": 5}
    assert record.correlation_id == "order-1"
    assert (await app.get_job("ok")).state == "succeeded"  # the original stays
    assert (await app.get_job("bad:rerun:1")).rerun_of == "bad"
    # a job whose correlation id was its own id: the re-run keeps the original's
    assert (await app.get_job("bad:rerun:1")).correlation_id == "bad"
    assert ("bad:rerun:1", 1, "bad") in runs
    assert ("ok:rerun:1", 1, "order-1") in runs
    # the CLI: a second rerun gets the next number
    base = ["--url", redis_server.url, "--prefix", prefix]
    assert await anyio.to_thread.run_sync(cli_main, ["job", "ok", "--rerun", *base]) == 0
    assert (await app.get_job("ok:rerun:2")).state == "queued"


# -- listing -------------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 3])
async def test_jobs_pages_with_a_cursor_over_more_than_one_page(
        redis_server: RedisProcess, prefix: str, shards: int) -> None:
    async with App(redis_server.url, prefix=prefix, queue_shards={"q": shards}) as app:
        await app.enqueue_many([_req("x", None, f"j{i:03d}", queue="q",
                                     correlation_id="odd" if i % 2 else None)
                                for i in range(250)])
        seen: list[str] = []
        cursor, calls = None, 0
        while True:
            page, cursor = await app.jobs("q", "queued", cursor, count=40)
            assert len(page) <= 40
            seen += [r.id for r in page]
            calls += 1
            if cursor is None:
                break
        assert sorted(seen) == [f"j{i:03d}" for i in range(250)]
        assert len(seen) == 250 and calls >= 250 // 40
        odd: list[str] = []
        cursor = None
        while True:
            page, cursor = await app.jobs("q", "ready", cursor, 100, correlation_id="odd")
            odd += [r.id for r in page]
            if cursor is None:
                break
        assert sorted(odd) == [f"j{i:03d}" for i in range(1, 250, 2)]


async def test_jobs_cursor_goes_on_when_its_job_left_the_set(real_app: App) -> None:
    app = real_app
    await app.enqueue_many([_req("x", None, f"j{i:02d}") for i in range(30)])
    first, cursor = await app.jobs("default", "queued", None, 10)
    assert cursor is not None
    assert await app.cancel(first[-1].id) == "canceled"  # the cursor's entry leaves
    second, cursor = await app.jobs("default", "queued", cursor, 10)
    assert [r.id for r in first + second] == [f"j{i:02d}" for i in range(20)]
    done, _ = await app.jobs("default", "done", None, 10)
    assert [r.id for r in done] == ["j09"] and done[0].state == "canceled"
    with pytest.raises(ConfigError):
        await app.jobs("default", "weird")
    with pytest.raises(ConfigError):
        await app.jobs("default", "queued", "garbage")


# -- per-run logs ----------------------------------------------------------------


async def test_run_logs_policies_and_caps(real_app: App, caplog: pytest.LogCaptureFixture,
                                          redis_server: RedisProcess, prefix: str) -> None:
    app = real_app

    def chatty(ctx: Context, fail: bool, lines: int, size: int = 10) -> str:
        for i in range(lines):
            ctx.log.info("step", i=i, pad="x" * size)
        if fail:
            raise ValueError("boom")
        return "ok"

    app.job(name="errs", max_attempts=2, backoff=lambda _: 0.0)(chatty)
    app.job(name="every", run_logs="all", run_log_lines=5)(chatty)
    app.job(name="quiet", run_logs="none", max_attempts=1)(chatty)
    app.job(name="bytes", run_logs="all", run_log_bytes=1000)(chatty)
    await app.enqueue("errs", {"fail": True, "lines": 3}, job_id="e-fail")
    await app.enqueue("errs", {"fail": False, "lines": 3}, job_id="e-ok")
    await app.enqueue("every", {"fail": False, "lines": 3}, job_id="a-ok")
    await app.enqueue("quiet", {"fail": True, "lines": 3}, job_id="q-fail")
    await app.enqueue("bytes", {"fail": False, "lines": 100, "size": 100}, job_id="b-cap")
    await app.enqueue("every", {"fail": False, "lines": 50}, job_id="a-cap")
    with caplog.at_level(logging.INFO, logger="leasequeue.job"):
        async with worker_running(app):
            with pytest.raises(JobDead):
                await app.wait("e-fail", timeout=20)
            for job_id in ("e-ok", "a-ok", "b-cap", "a-cap"):
                await app.wait(job_id, timeout=20)
            with pytest.raises(JobDead):
                await app.wait("q-fail", timeout=20)
    # errors: both failed runs kept, each with its lines; the success keeps none
    failed = (await app.get_job("e-fail")).logs
    assert [(r.attempt, r.outcome, len(r.lines)) for r in failed] == [(1, "work", 3),
                                                                      (2, "work", 3)]
    assert "step i=0 pad=xxxxxxxxxx" in failed[0].lines[0]
    assert (await app.get_job("e-ok")).logs == []
    # all: a success keeps its lines; the line cap holds, with a note of the rest
    assert [len(r.lines) for r in (await app.get_job("a-ok")).logs] == [3]
    capped = (await app.get_job("a-cap")).logs[0].lines
    assert len(capped) == 6 and capped[-1].startswith("... 45 more line(s) dropped")
    # the byte cap holds
    by_bytes = (await app.get_job("b-cap")).logs[0].lines
    assert sum(len(line.encode()) + 1 for line in by_bytes[:-1]) <= 1000
    assert "dropped" in by_bytes[-1]
    # none: nothing kept
    assert (await app.get_job("q-fail")).logs == []
    # the lines still go to stdlib logging, every one of them
    steps = sum(1 for r in caplog.records if r.getMessage() == "step")
    assert steps == 3 * 2 + 3 + 3 + 3 + 100 + 50
    # the CLI prints them
    base = ["--url", redis_server.url, "--prefix", prefix]
    assert await anyio.to_thread.run_sync(cli_main, ["job", "e-fail", "--logs", *base]) == 0


async def test_run_logs_are_deleted_with_the_record(real_app: App) -> None:
    app = real_app
    qk = app.keys("default")

    @app.job(run_logs="all", max_attempts=1, retention=60)
    async def noisy(ctx: Context, fail: bool) -> None:
        ctx.log.info("hello")
        if fail:
            raise PermanentError("no")

    await app.enqueue_many([_req("noisy", {"fail": i % 2 == 1}, f"n{i}") for i in range(20)])
    async with worker_running(app):
        await eventually(lambda: _finished(app, 20), what="all ended")
    assert await app.redis.hlen(qk.logs) == 20
    # retention runs out: expire deletes the record and its logs
    await app.redis.zadd(qk.done, {f"n{i}": 1 for i in range(0, 20, 2)}, xx=True)
    assert await app.scripts.expire(qk, 100) == 10
    assert await app.redis.hlen(qk.logs) == 10
    # purged dead jobs take their logs along
    assert await app.purge_dead() == 10
    assert await app.redis.hlen(qk.logs) == 0
    assert await app.redis.hlen(qk.jobs) == 0


def test_run_log_options_are_checked() -> None:
    app = App("memory://opts")
    for options in ({"run_logs": "some"}, {"run_log_lines": 0},
                    {"run_log_bytes": 10**6}):
        with pytest.raises(ConfigError):
            app.job(name="j", **options)(lambda ctx: None)  # type: ignore[call-overload]
    anyio.run(app.close)


# -- helpers -----------------------------------------------------------------------


def _req(name: str, payload: dict[str, Any] | None, job_id: str, queue: str | None = None,
         correlation_id: str | None = None) -> Any:
    from leasequeue import JobRequest

    return JobRequest(name, payload, job_id, queue=queue, correlation_id=correlation_id)


async def _leased_is(app: App, queue: str, n: int) -> bool:
    return (await app.stats(queue)).leased == n


async def _succeeded_is(app: App, queue: str, n: int) -> bool:
    return (await app.stats(queue)).counters.get("succeeded", 0) == n


async def _finished(app: App, n: int) -> bool:
    c = (await app.stats()).counters
    return c.get("succeeded", 0) + c.get("dead", 0) == n

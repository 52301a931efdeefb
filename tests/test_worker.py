"""The worker runtime in-process on a real redis-server: outcomes, budgets,
backoff, leases, timeouts, stop grace, shutdown and the boot log."""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio
import pytest

from leasequeue import App, Context, PermanentError, Retry, TransientError, Worker, fixed
from leasequeue.backoff import exponential
from leasequeue.models import JobRecord
from tests.helpers import DEFAULT_BUDGET, eventually, expire_lease, server_ms, worker_running

pytestmark = pytest.mark.anyio


# the shared helpers, under the names these tests read best with
running = worker_running
until = eventually


async def state_is(app: App, job_id: str, *states: str) -> JobRecord | None:
    rec = await app.get_job(job_id)
    return rec if rec.state in states else None


async def test_async_and_sync_handlers_succeed_with_context(real_app: App) -> None:
    app = real_app
    seen: dict[str, Any] = {}

    @app.job
    async def add(ctx: Context, a: int, b: int) -> int:
        seen["async"] = (ctx.job_id, ctx.name, ctx.queue, ctx.attempt, ctx.correlation_id,
                         ctx.request_id, ctx.worker_id)
        return a + b

    @app.job
    def mul(ctx: Context, a: int, b: int) -> int:
        seen["sync"] = ctx.attempt
        return a * b

    await app.enqueue("add", {"a": 2, "b": 3}, job_id="a1", correlation_id="c1",
                      request_id="r1")
    await app.enqueue("mul", {"a": 2, "b": 3}, job_id="m1")
    async with running(app, worker_id="w-ctx"):
        await until(lambda: state_is(app, "a1", "succeeded"))
        await until(lambda: state_is(app, "m1", "succeeded"))
    assert (await app.get_job("a1")).result == 5
    assert (await app.get_job("m1")).result == 6
    assert seen["async"] == ("a1", "add", "default", 1, "c1", "r1", "w-ctx")
    assert seen["sync"] == 1


async def test_plain_exception_retries_then_dies_max_attempts(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3, backoff=fixed(0))
    async def broken(ctx: Context) -> None:
        raise ValueError(f"bad on attempt {ctx.attempt}")

    await app.enqueue("broken", job_id="b")
    async with running(app):
        rec = await until(lambda: state_is(app, "b", "dead"))
    assert (rec.reason, rec.attempt, rec.work_failures, rec.infra_failures) == (
        "max-attempts", 3, 3, 0)
    assert rec.error is not None and rec.error.splitlines()[0] == "ValueError: bad on attempt 3"


async def test_permanent_error_is_dead_at_once(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=5)
    async def reject(ctx: Context) -> None:
        raise PermanentError("order does not exist")

    await app.enqueue("reject", job_id="p")
    async with running(app):
        rec = await until(lambda: state_is(app, "p", "dead"))
    assert (rec.reason, rec.attempt, rec.work_failures) == ("permanent", 1, 0)


async def test_transient_errors_use_the_infra_budget(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1, max_infra_attempts=5, infra_backoff=fixed(0))
    async def flaky(ctx: Context) -> str:
        failures = await app.redis.incr(f"{app.prefix}:flaky")
        if failures <= 2:
            raise TransientError("upstream 503")
        if failures == 3:
            raise ConnectionError("reset by peer")
        return "ok"

    await app.enqueue("flaky", job_id="f")
    async with running(app):
        rec = await until(lambda: state_is(app, "f", "succeeded"))
    # three infrastructure failures did not spend the single work attempt
    assert (rec.attempt, rec.infra_failures, rec.work_failures) == (1, 3, 0)


async def test_infra_budget_spent_is_dead(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=5, max_infra_attempts=2, infra_backoff=fixed(0))
    async def down(ctx: Context) -> None:
        raise TimeoutError("db timeout")

    await app.enqueue("down", job_id="d")
    async with running(app):
        rec = await until(lambda: state_is(app, "d", "dead"))
    assert (rec.reason, rec.infra_failures, rec.work_failures) == ("max-infra-attempts", 2, 0)


async def test_retry_due_time_follows_backoff_on_server_clock(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3, backoff=fixed(30))
    async def later(ctx: Context) -> None:
        raise RuntimeError("not yet")

    await app.enqueue("later", job_id="l")
    before = await server_ms(app)
    async with running(app):
        rec = await until(lambda: state_is(app, "l", "scheduled"))
    after = await server_ms(app)
    assert rec.due_ms is not None
    assert before + 30_000 <= rec.due_ms <= after + 30_000


async def test_explicit_retry_uses_its_delay(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3, backoff=fixed(0))
    async def wait_for_it(ctx: Context) -> None:
        raise Retry(delay=45)

    await app.enqueue("wait_for_it", job_id="r")
    before = await server_ms(app)
    async with running(app):
        rec = await until(lambda: state_is(app, "r", "scheduled"))
    assert rec.due_ms is not None and before + 45_000 <= rec.due_ms <= before + 47_000


def test_backoff_policies() -> None:
    exp = exponential(1, 10)
    assert [exp(a) for a in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 8, 10, 10]
    jittered = exponential(1, 10, jitter=True)
    for attempt in range(1, 8):
        for _ in range(200):
            assert 0 <= jittered(attempt) <= min(10, 2 ** (attempt - 1))
    assert fixed(3)(9) == 3


async def test_custom_backoff_callable(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3, backoff=lambda attempt: 20.0 * attempt)
    async def custom(ctx: Context) -> None:
        raise RuntimeError("x")

    await app.enqueue("custom", job_id="c")
    before = await server_ms(app)
    async with running(app):
        rec = await until(lambda: state_is(app, "c", "scheduled"))
    assert rec.due_ms is not None and before + 20_000 <= rec.due_ms <= before + 22_000


async def test_renewal_keeps_a_job_five_times_longer_than_its_lease(real_app: App) -> None:
    app = real_app

    # a 2 s lease, not 1 s: a renewal may be up to 4/3 s late (the machine's
    # stall) before the reaper takes the job; a 1 s lease lost it once, at
    # 53% of the CPU taken by the hypervisor (2026-12-02)
    @app.job(timeout=30)
    async def long(ctx: Context) -> str:
        await anyio.sleep(10.0)
        return "done"

    await app.enqueue("long", job_id="long")
    async with running(app, lease=2.0, reap_interval=0.2):
        rec = await until(lambda: state_is(app, "long", "succeeded"), limit=25)
    assert (rec.attempt, rec.token) == (1, 1)


async def test_stolen_lease_stops_run_and_discards_result(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    runs: list[int] = []
    stopped: list[int] = []

    @app.job(max_attempts=3)
    async def hold(ctx: Context) -> int:
        runs.append(ctx.token)
        if ctx.token == 1:
            try:
                await anyio.sleep(30)  # will be stopped when its lease is stolen
            except anyio.get_cancelled_exc_class():
                stopped.append(ctx.token)
                raise
        return ctx.token

    caplog.set_level(logging.INFO, logger="leasequeue")
    await app.enqueue("hold", job_id="h")
    async with running(app, lease=3.0, reap_interval=60):
        await until(lambda: runs == [1])
        await expire_lease(app, "default", "h")
        await app.scripts.reap(app.keys("default"), 10, 0, 0,
                               {}, DEFAULT_BUDGET)  # another worker's reaper
        rec = await until(lambda: state_is(app, "h", "succeeded"), limit=15)
    assert rec.result == 2 and rec.token == 2
    await until(lambda: stopped == [1])  # the stale run was stopped, not left running
    assert any("lease lost" in r.getMessage() for r in caplog.records)


async def test_timeout_is_a_work_failure(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1, timeout=0.2)
    async def stuck(ctx: Context) -> None:
        await anyio.sleep(30)

    await app.enqueue("stuck", job_id="t")
    async with running(app):
        rec = await until(lambda: state_is(app, "t", "dead"))
    assert rec.reason == "max-attempts" and rec.error is not None
    assert "timed out after 0.2s" in rec.error


async def test_sync_handler_ignoring_stop_is_abandoned_after_grace(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app

    @app.job(max_attempts=1, timeout=0.2, stop_grace=0.3)
    def blocking(ctx: Context) -> None:
        time.sleep(2)  # ignores ctx.is_stopping()

    caplog.set_level(logging.WARNING, logger="leasequeue")
    await app.enqueue("blocking", job_id="s")
    async with running(app, max_abandoned=5) as worker:
        await until(lambda: worker.abandoned == 1, what="the thread to be abandoned")
        # abandoned, not forgotten: the job stays leased to this run (never
        # run twice at once) until its thread really returns
        assert (await app.get_job("s")).state == "leased"
        rec = await until(lambda: state_is(app, "s", "succeeded"), limit=5)
    assert rec.token == 1  # a sync handler that returns after its timeout did its work
    abandoned = [r for r in caplog.records if "abandoned" in r.getMessage()]
    assert abandoned and abandoned[0].fields["job_id"] == "s"  # type: ignore[attr-defined]
    assert abandoned[0].fields["grace"] == 0.3  # type: ignore[attr-defined]


async def test_sync_handler_sees_is_stopping_at_timeout(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=1, timeout=0.2, stop_grace=5)
    def polite(ctx: Context) -> str:
        while not ctx.is_stopping():
            time.sleep(0.01)
        return "wrapped up"

    await app.enqueue("polite", job_id="p")
    async with running(app):
        rec = await until(lambda: state_is(app, "p", "succeeded"))
    assert rec.result == "wrapped up"


async def test_shutdown_returns_unfinished_runs_with_attempt_refunded(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    started = anyio.Event()

    @app.job
    async def forever(ctx: Context) -> None:
        started.set()
        await anyio.sleep(60)

    caplog.set_level(logging.INFO, logger="leasequeue")
    await app.enqueue("forever", job_id="x")
    with anyio.fail_after(10):
        async with running(app, shutdown_timeout=0.3):
            await started.wait()
    rec = await app.get_job("x")
    assert (rec.state, rec.attempt, rec.token) == ("queued", 0, 1)
    assert any("returned to the queue" in r.getMessage() for r in caplog.records)


async def test_handler_ignoring_cancellation_cannot_wedge_shutdown(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    started = anyio.Event()

    @app.job(stop_grace=0.3)
    def stubborn(ctx: Context) -> None:
        anyio.from_thread.run_sync(started.set)
        time.sleep(4)

    caplog.set_level(logging.WARNING, logger="leasequeue")
    await app.enqueue("stubborn", job_id="y")
    t0 = time.monotonic()
    with anyio.fail_after(10):
        async with running(app, shutdown_timeout=0.2, max_abandoned=5):
            await started.wait()
            t0 = time.monotonic()
    assert time.monotonic() - t0 < 2.0
    # its thread still runs: the job is not handed back (it would run twice at
    # once); its lease lapses and the reaper counts the attempt it started
    rec = await app.get_job("y")
    assert (rec.state, rec.attempt) == ("leased", 1)
    assert any("left behind" in r.getMessage() for r in caplog.records)


async def test_cancel_a_running_job(real_app: App) -> None:
    app = real_app
    started = anyio.Event()

    @app.job
    async def long(ctx: Context) -> None:
        started.set()
        await anyio.sleep(60)

    await app.enqueue("long", job_id="c")
    async with running(app, lease=1.0):
        await started.wait()
        assert await app.cancel("c") == "cancel-requested"
        rec = await until(lambda: state_is(app, "c", "canceled"))
    assert rec.state == "canceled"


async def test_unknown_job_name_is_dead_not_retried(real_app: App) -> None:
    app = real_app

    @app.job
    async def known(ctx: Context) -> None:
        return None

    await app.enqueue("not_registered_here", queue="default", job_id="u")
    async with running(app):
        rec = await until(lambda: state_is(app, "u", "dead"))
    assert rec.reason == "unknown-job" and rec.attempt == 1


async def test_boot_log_lists_jobs_and_warns(real_app: App,
                                             caplog: pytest.LogCaptureFixture) -> None:
    app = real_app

    @app.job(queue="emails", max_attempts=7)
    async def send(ctx: Context) -> None:
        return None

    @app.job(queue="default")
    async def other(ctx: Context) -> None:
        return None

    caplog.set_level(logging.INFO, logger="leasequeue")
    async with running(app, queues=["default"], worker_id="boot"):
        pass
    fields = [getattr(r, "fields", {}) for r in caplog.records]
    starting = [f for r, f in zip(caplog.records, fields, strict=True)
                if r.getMessage() == "worker starting"]
    assert starting and starting[0]["queues"] == ["default"] and starting[0]["concurrency"] == 4
    registered = {f["job"]: f for r, f in zip(caplog.records, fields, strict=True)
                  if r.getMessage() == "job registered"}
    assert registered["send"]["max_attempts"] == 7 and registered["send"]["queue"] == "emails"
    warned = [f for r, f in zip(caplog.records, fields, strict=True)
              if "never run here" in r.getMessage()]
    assert [f["job"] for f in warned] == ["send"]


async def test_boot_warns_on_empty_registry(real_app: App,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="leasequeue")
    async with running(real_app):
        pass
    assert any("no jobs are registered" in r.getMessage() for r in caplog.records)


async def test_evicting_redis_is_a_boot_error(real_app: App) -> None:
    from leasequeue.errors import ConfigError

    await real_app.redis.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(ConfigError, match="allkeys-lru"):
            await Worker(real_app).run()
        async with running(real_app, allow_eviction=True):
            pass
    finally:
        await real_app.redis.config_set("maxmemory-policy", "noeviction")


async def test_worker_id_that_would_break_the_record_is_refused(real_app: App) -> None:
    from leasequeue.errors import ConfigError

    with pytest.raises(ConfigError, match="worker id"):
        Worker(real_app, worker_id="pod|a")


async def test_an_infinite_retry_delay_is_capped_not_a_crash(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3)
    async def never(ctx: Context) -> None:
        raise Retry(delay=float("inf"))

    await app.enqueue("never", job_id="inf")
    async with running(app):
        rec = await until(lambda: state_is(app, "inf", "scheduled"))
    assert rec.due_ms is not None and rec.due_ms > await server_ms(app) + 29 * 24 * 3600 * 1000

"""The run table and the worker runtime's findings of issue 10, each a
regression test that failed before the fix: lapsed or silent limiter slots,
`replace` across services, abandoned threads, stale starts, cancel before
start, partial ack flushes, and what a new user trips over (tracebacks,
signatures, results that cannot be stored, the infra-failure count)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from leasequeue import App, Context, LocalLimiter, RedisLimiter, TransientError, fixed
from leasequeue.errors import LeaseQueueError, RedisUnavailable
from leasequeue.models import ClaimedJob
from leasequeue.runtime.acker import Acker, AckerParams
from leasequeue.runtime.handler import RunScopes
from leasequeue.runtime.heartbeater import Heartbeater, HeartbeaterParams
from leasequeue.runtime.runs import (
    InvalidTransition,
    Phase,
    RunRecord,
    RunTable,
    SlotHold,
    StopReason,
)
from leasequeue.store.specs import AckReply, RenewReply
from tests.harness.redis_proc import RedisProcess
from tests.harness.tcp_proxy import TcpProxy
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio


def _job(job_id: str = "j", queue: str = "default", token: int = 1,
         started: bool = True) -> ClaimedJob:
    return ClaimedJob(job_id, queue, token, 1, "noop", b"", 3, 10, 0, 0, 0, started)


# -- the run table ----------------------------------------------------------------


def test_phases_follow_the_table_and_invalid_changes_raise() -> None:
    table = RunTable(lease_s=30)
    (run,) = table.claimed([_job()], time.monotonic())
    assert run.phase is Phase.CLAIMED and len(table) == 1
    assert table.start(run, 0.3) and run.phase is Phase.STARTED and run.running
    with pytest.raises(InvalidTransition):
        table.settling(run)  # a started run settles only once its handler returned
    table.returned(run)
    assert run.phase is Phase.FINISHED and not run.running
    assert table.settling(run) and run.phase is Phase.SETTLING
    with pytest.raises(InvalidTransition):
        table.settling(run)
    table.settled(run, accepted=True)
    assert run.phase is Phase.SETTLED and len(table) == 0


def test_a_lost_run_stays_counted_until_its_handler_returns() -> None:
    table = RunTable(lease_s=30)
    (run,) = table.claimed([_job()], time.monotonic())
    run.is_sync, run.stop_grace = True, 5.0
    assert table.start(run, 0.3)
    table.lose(run)
    assert run.phase is Phase.LOST and run.stop_reason == "lease-lost"
    assert table.running() == [run] and len(table) == 1  # still holds its executor
    assert not table.settling(run)  # nothing may be written for a lost run
    table.returned(run)
    assert len(table) == 0


def test_a_run_whose_lease_may_have_lapsed_does_not_start() -> None:
    table = RunTable(lease_s=3)
    (stale,) = table.claimed([_job("stale")], time.monotonic() - 2.5)  # 0.5 s left
    (fresh,) = table.claimed([_job("fresh")], time.monotonic())
    assert not table.start(stale, 1 / 3)
    assert stale.phase is Phase.CLAIMED
    assert table.start(fresh, 1 / 3)


def test_lapses_lose_leases_and_stop_runs_whose_slot_lapsed() -> None:
    table = RunTable(lease_s=3)
    now = time.monotonic()
    (lapsed, slotted) = table.claimed([_job("a"), _job("b")], now)
    for run in (lapsed, slotted):
        assert table.start(run, 0.3)
    lapsed.lease_confirmed_at = now - 4
    slotted.slots = (SlotHold("job.x", "h", lease_s=1.0, confirmed_at=now - 2),)
    stopped = dict((r.job.id, reason) for r, reason in table.lapses(time.monotonic()))
    assert stopped == {"a": "lease-lost", "b": "slot-lost"}
    assert lapsed.phase is Phase.LOST and slotted.phase is Phase.STARTED
    assert slotted.stop_reason == "slot-lost"


# -- the heartbeater acts on what renewal answers ------------------------------------


class _RenewScripts:
    """renew answers with the given replies, one per held run."""

    def __init__(self, replies: list[RenewReply]) -> None:
        self.replies = replies

    async def renew(self, qk: Any, held: Sequence[tuple[str, int]],
                    lease_ms: int) -> list[RenewReply]:
        return self.replies[:len(held)]


def _heartbeater(table: RunTable, replies: list[RenewReply]) -> Heartbeater:
    return Heartbeater(HeartbeaterParams(
        scripts=_RenewScripts(replies), keys=lambda q: q,  # type: ignore[arg-type,return-value]
        table=table, lease_s=30, limiter=LocalLimiter(), limiter_lease_s=None))


async def test_a_run_stops_at_its_own_deadline_while_renewals_hang() -> None:
    """Renewal calls that hang (a silent Redis: each gives up after a quarter
    lease) must not delay the stop: the run is lost within 50 ms of the
    instant its lease could lapse by our clock, never before it."""
    lease_s = 1.2
    table = RunTable(lease_s=lease_s)
    (run,) = table.claimed([_job("a")], time.monotonic())
    assert table.start(run, 0.3)

    class Hanging(_RenewScripts):
        async def renew(self, qk: Any, held: Sequence[tuple[str, int]],
                        lease_ms: int) -> list[RenewReply]:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    lost_at: list[float] = []
    lose = table.lose

    def recording_lose(r: RunRecord, reason: StopReason = StopReason.LEASE_LOST) -> None:
        lost_at.append(time.monotonic())
        lose(r, reason)

    table.lose = recording_lose  # type: ignore[method-assign]
    heartbeater = Heartbeater(HeartbeaterParams(
        scripts=Hanging([]), keys=lambda q: q,  # type: ignore[arg-type,return-value]
        table=table, lease_s=lease_s, limiter=LocalLimiter(), limiter_lease_s=None))
    with anyio.move_on_after(lease_s + 1.0):
        await heartbeater.run()
    assert run.phase is Phase.LOST and len(lost_at) == 1
    late = lost_at[0] - run.lease_valid_until
    assert 0 <= late < 0.05, f"stopped {late:+.3f} s after its deadline"


async def test_a_lost_renewal_stops_the_run() -> None:
    """LOST stops a running run and loses it (no more renewals or writes); a
    run already settling is left to its settle reply (its ack may have won)."""
    table = RunTable(lease_s=30)
    running, settling = table.claimed([_job("a"), _job("b")], time.monotonic())
    for run in (running, settling):
        assert table.start(run, 0.3)
    table.returned(settling)
    assert table.settling(settling)
    await _heartbeater(table, [RenewReply.LOST, RenewReply.LOST]).beat()
    assert (running.phase, running.stop_reason) == (Phase.LOST, StopReason.LEASE_LOST)
    assert settling.phase is Phase.SETTLING and settling.stop_reason is None
    assert not table.settling(running)  # nothing may be written for it
    assert list(table.for_renewal()) == ["default"]
    assert table.for_renewal()["default"] == [settling]



async def test_a_renewal_that_loses_to_the_ack_is_not_a_lost_lease(
        caplog: pytest.LogCaptureFixture) -> None:
    """The ack landed while the renewal was on the wire (the run is settled
    when the LOST answer comes back): the ack won, nothing is lost or logged."""
    table = RunTable(lease_s=30)
    (run,) = table.claimed([_job("a")], time.monotonic())
    assert table.start(run, 0.3)
    table.returned(run)

    class AckedMeanwhile(_RenewScripts):
        async def renew(self, qk: Any, held: Sequence[tuple[str, int]],
                        lease_ms: int) -> list[RenewReply]:
            assert table.settling(run)
            table.settled(run, accepted=True)
            return [RenewReply.LOST]

    caplog.set_level(logging.WARNING, logger="leasequeue")
    await Heartbeater(HeartbeaterParams(
        scripts=AckedMeanwhile([]), keys=lambda q: q,  # type: ignore[arg-type,return-value]
        table=table, lease_s=30, limiter=LocalLimiter(), limiter_lease_s=None)).beat()
    assert run.phase is Phase.SETTLED and run.stop_reason is None
    assert not [r for r in caplog.records if "lost" in r.getMessage()]

async def test_a_cancel_request_in_a_renewal_stops_the_run() -> None:
    table = RunTable(lease_s=30)
    (run,) = table.claimed([_job()], time.monotonic() - 5)
    assert table.start(run, 0.1)
    before = run.lease_confirmed_at
    await _heartbeater(table, [RenewReply.CANCEL_REQUESTED]).beat()
    assert run.stop_reason is StopReason.CANCELED and run.phase is Phase.STARTED
    assert run.lease_confirmed_at > before  # still renewed: it settles as canceled


# -- finding 11: a partly failed ack flush re-sends only what did not land ----------


class _FlakyScripts:
    """Acks land for queue "ok"; the first call for queue "down" fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.failed_once = False

    async def ack(self, qk: Any, outcome: str, retention_ms: int,
                  items: Sequence[tuple[str, int, bytes, str]]) -> list[AckReply]:
        self.calls.append((qk, [i[0] for i in items]))
        if qk == "down" and not self.failed_once:
            self.failed_once = True
            raise RedisUnavailable("redis://down", ConnectionError("reset"))
        return [AckReply.FINISHED] * len(items)


async def test_a_partly_failed_ack_flush_resends_only_the_failed_group() -> None:
    scripts = _FlakyScripts()
    done: list[tuple[str, bool]] = []
    table = RunTable(lease_s=30)
    runs = table.claimed([_job("a", "ok"), _job("b", "down")], time.monotonic())
    acker = Acker(AckerParams(scripts, lambda q: q, lambda r, ok: done.append((r.job.id, ok))))
    for run in runs:
        assert table.start(run, 0.3)
        table.returned(run)
        assert table.settling(run)
        acker.submit(run, "succeeded", 1000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(acker.run)
        await eventually(lambda: len(done) >= 2)
        acker.close()
    assert sorted(done) == [("a", True), ("b", True)]
    assert scripts.calls == [("ok", ["a"]), ("down", ["b"]), ("down", ["b"])]


# -- findings 1 and 2: a run holds its lease and its limiter slots ----------------


async def test_a_lapsed_limiter_slot_stops_the_run(real_app: App) -> None:
    app = real_app
    seen: list[str | None] = []
    with RedisProcess() as limiter_redis:
        limiter = RedisLimiter(limiter_redis.url, prefix=f"{app.prefix}:lim", lease=1.0)

        @app.job(max_concurrent=1, max_infra_attempts=5, infra_backoff=fixed(30))
        async def solo(ctx: Context) -> None:
            try:
                await anyio.sleep(30)
            finally:
                seen.append(ctx.stop_reason)

        await app.enqueue("solo", job_id="s")
        async with worker_running(app, limiter=limiter, lease=10.0):
            await eventually(lambda: _state(app, "s", "leased"))
            await anyio.sleep(0.2)
            limiter_redis.kill()  # the slot can no longer be renewed
            t0 = time.monotonic()
            await eventually(lambda: seen, limit=5, what="the run to be stopped")
            stopped_after = time.monotonic() - t0
        rec = await app.get_job("s")
        await limiter.close()
    assert seen == ["slot-lost"]
    assert stopped_after < 1.0 + 1.0  # within the limiter lease and a heartbeat
    # an infrastructure failure: no attempt spent, tried again later
    assert (rec.state, rec.infra_failures, rec.attempt) == ("scheduled", 1, 0)


async def test_a_silent_limiter_does_not_delay_job_lease_renewals(
        real_app: App, redis_server: RedisProcess) -> None:
    app = real_app
    runs: list[tuple[str, int]] = []
    proxy = TcpProxy(redis_server.port)
    proxy.start()
    try:
        limiter = RedisLimiter(proxy.url, prefix=f"{app.prefix}:lim", lease=2.0)

        @app.job(max_concurrent=1, max_infra_attempts=5, infra_backoff=fixed(30))
        async def limited(ctx: Context) -> None:
            await anyio.sleep(4)

        @app.job
        async def free(ctx: Context) -> str:
            runs.append((ctx.job_id, ctx.token))
            await anyio.sleep(4)
            return "done"

        await app.enqueue("limited", job_id="l")
        await app.enqueue("free", job_id="f")
        async with worker_running(app, limiter=limiter, lease=1.5, reap_interval=0.2):
            await eventually(lambda: runs)
            proxy.blackhole()  # the limiter's connections go silent
            rec = await eventually(lambda: _state(app, "f", "succeeded"), limit=15)
        await limiter.close()
    finally:
        proxy.close()
    # the unrelated job kept its lease: it ran once, under its first token
    assert len(runs) == 1 and rec.token == runs[0][1]


# -- finding 3: `replace` across services stops the run where its job lives ----------


async def test_replace_across_services_cancels_in_the_holders_keyspace(
        redis_server: RedisProcess, prefix: str) -> None:
    shared = f"{prefix}:shared"
    a = App(redis_server.url, prefix=f"{prefix}a", limiter=RedisLimiter(prefix=shared, lease=1.5))
    b = App(redis_server.url, prefix=f"{prefix}b", limiter=RedisLimiter(prefix=shared, lease=1.5))
    stopped: list[str | None] = []
    try:
        for app in (a, b):
            @app.job(name="sync_crm", max_concurrent=1, on_conflict="replace")
            async def sync_crm(ctx: Context) -> None:
                try:
                    await anyio.sleep(30)
                finally:
                    stopped.append(f"{ctx.queue}:{ctx.job_id}:{ctx.stop_reason}")

            @app.job(name="other")
            async def other(ctx: Context) -> str:
                await anyio.sleep(2)
                return "kept"

        await a.enqueue("sync_crm", job_id="j1")  # token 1 in a's keyspace
        await b.enqueue("other", job_id="j1")  # same id and token in b's keyspace
        async with worker_running(a, worker_id="wa"), worker_running(b, worker_id="wb"):
            await eventually(lambda: _state(a, "j1", "leased"))
            await eventually(lambda: _state(b, "j1", "leased"))
            await b.enqueue("sync_crm", job_id="j2")  # evicts a's run
            await eventually(lambda: _state(a, "j1", "canceled"), limit=10)
            rec_b = await eventually(lambda: _state(b, "j1", "succeeded"), limit=10)
        assert rec_b.result == "kept" and not rec_b.cancel_requested
        assert "default:j1:replaced" in stopped
    finally:
        await a.close()
        await b.close()


# -- finding 4: an abandoned thread keeps its slot and its job ------------------------


async def test_an_abandoned_thread_keeps_its_concurrency_slot_and_its_job(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    release = threading.Event()
    ran: list[str] = []

    @app.job(timeout=0.2, stop_grace=0.2, max_attempts=3)
    def stuck(ctx: Context) -> str:
        ran.append(f"stuck:{ctx.token}")
        release.wait(20)  # ignores ctx.is_stopping()
        return "late"

    @app.job
    async def after(ctx: Context) -> None:
        ran.append("after")

    caplog.set_level(logging.WARNING, logger="leasequeue")
    await app.enqueue("stuck", job_id="s")
    async with worker_running(app, concurrency=1, max_abandoned=2, lease=1.0) as worker:
        await eventually(lambda: worker.abandoned == 1, what="the thread to be abandoned")
        await app.enqueue("after", job_id="a")
        await anyio.sleep(1.5)  # longer than the lease: it is renewed, not reaped
        assert ran == ["stuck:1"]  # the next job waits: the slot is still taken
        assert (await app.get_job("s")).state == "leased"
        release.set()
        await eventually(lambda: _state(app, "a", "succeeded"))
    rec = await app.get_job("s")
    assert ran == ["stuck:1", "after"] and (rec.state, rec.token) == ("succeeded", 1)
    assert any("abandoned" in r.getMessage() for r in caplog.records)


async def test_abandoned_threads_at_the_cap_stop_the_worker(
        real_app: App, caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    release = threading.Event()

    @app.job(timeout=0.2, stop_grace=0.2)
    def stuck(ctx: Context) -> None:
        release.wait(20)

    caplog.set_level(logging.ERROR, logger="leasequeue")
    await app.enqueue("stuck", job_id="s")
    from leasequeue import Worker

    worker = Worker(app, concurrency=2, lease=2.0, shutdown_timeout=0.5, max_abandoned=1)
    try:
        with anyio.fail_after(10):
            await worker.run()  # returns on its own
        assert worker.abandoned_cap_reached
        assert any("max_abandoned" in r.getMessage() for r in caplog.records)
        # the thread still runs: its job was not handed back to run twice
        assert (await app.get_job("s")).state == "leased"
    finally:
        release.set()


# -- findings 9 and 12: no start after a stall, no start after a cancel ------------


async def test_a_run_claimed_before_a_stall_is_not_started(real_app: App) -> None:
    from leasequeue import Worker

    app = real_app
    ran: list[str] = []

    @app.job(max_attempts=1)
    async def once(ctx: Context) -> None:
        ran.append(ctx.job_id)

    await app.enqueue("once", job_id="o")
    worker = Worker(app, lease=3.0)
    batch = await app.scripts.claim(app.keys("default"), 1, 3000, worker.worker_id, 0, "c1")
    # the claim happened 2.5 s ago by this process's clock: a stall (GC, a
    # paused container) left too little of the lease to start safely
    (run,) = worker.table.claimed(batch.jobs, time.monotonic() - 2.5)
    await worker.executor._process(run, RunScopes())
    rec = await app.get_job("o")
    assert ran == [] and (rec.state, rec.attempt) == ("queued", 0)


async def test_a_cancel_before_start_ends_the_job_without_running_it(real_app: App) -> None:
    app = real_app
    app.limiter = LocalLimiter()
    ran: list[str] = []

    @app.job(max_concurrent=1, slot_backoff=5)
    async def one(ctx: Context, hold: float) -> None:
        ran.append(ctx.job_id)
        await anyio.sleep(hold)

    await app.enqueue("one", {"hold": 0.8}, job_id="first")
    async with worker_running(app, concurrency=2):
        await eventually(lambda: ran == ["first"])
        await app.enqueue("one", {"hold": 0}, job_id="second")
        await eventually(lambda: _state(app, "second", "leased"))  # waits for the slot
        assert await app.cancel("second") == "canceled"
        await eventually(lambda: _state(app, "first", "succeeded"))
        await anyio.sleep(0.3)
    assert ran == ["first"] and (await app.get_job("second")).state == "canceled"


# -- what a new user trips over ------------------------------------------------------


async def test_a_failure_keeps_its_traceback_and_a_history(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=2, backoff=fixed(0))
    async def broken(ctx: Context) -> None:
        raise ValueError(f"bad on attempt {ctx.attempt}")

    await app.enqueue("broken", job_id="b")
    async with worker_running(app):
        rec = await eventually(lambda: _state(app, "b", "dead"))
    assert rec.error is not None and rec.error.startswith("ValueError: bad on attempt 2")
    assert "Traceback" in rec.error and "in broken" in rec.error
    assert [(e.attempt, e.kind) for e in rec.errors] == [(1, "work"), (2, "work")]


async def test_a_handler_that_cannot_take_the_payload_is_dead_at_once(real_app: App) -> None:
    app = real_app

    @app.job(max_attempts=3)
    async def greet(ctx: Context, name: str) -> str:
        return f"hello {name}"

    await app.enqueue("greet", {"nmae": "typo"}, job_id="g")
    async with worker_running(app):
        rec = await eventually(lambda: _state(app, "g", "dead"))
    assert rec.reason == "bad-payload" and rec.attempt == 1
    assert "cannot take this payload" in (rec.error or "")


async def test_a_result_that_cannot_be_stored_says_why(real_app: App) -> None:
    app = real_app

    @app.job
    async def odd(ctx: Context) -> object:
        return object()

    await app.enqueue("odd", job_id="o")
    async with worker_running(app):
        rec = await eventually(lambda: _state(app, "o", "succeeded"))
    assert rec.result is None and "result not stored" in (rec.error or "")


async def test_the_context_counts_infrastructure_failures(real_app: App) -> None:
    app = real_app
    seen: list[tuple[int, int]] = []

    @app.job(max_infra_attempts=5, infra_backoff=fixed(0))
    async def flaky(ctx: Context) -> None:
        seen.append((ctx.attempt, ctx.infra_failures))
        if ctx.infra_failures < 2:
            raise TransientError("upstream 503")

    await app.enqueue("flaky", job_id="f")
    async with worker_running(app):
        await eventually(lambda: _state(app, "f", "succeeded"))
    # the attempt is refunded each time: infra_failures is what moves
    assert seen == [(1, 0), (1, 1), (1, 2)]


def test_raise_if_stopping_raises_lease_lost() -> None:
    from leasequeue import Context
    from leasequeue.errors import LeaseLost, RunStopped

    table = RunTable(lease_s=30)
    (run,) = table.claimed([_job()], time.monotonic())
    assert table.start(run, 0.3)
    ctx = Context(job_id="j", name="noop", queue="default", attempt=1, token=1,
                  worker_id="w", correlation_id="", request_id="", run=run)
    ctx.raise_if_stopping()  # nothing yet
    table.stop(run, StopReason.CANCELED)
    with pytest.raises(RunStopped):
        ctx.raise_if_stopping()
    run.stop_reason = None
    table.lose(run)
    with pytest.raises(LeaseLost):
        ctx.raise_if_stopping()
    assert isinstance(LeaseLost("x"), LeaseQueueError)


async def _state(app: App, job_id: str, *states: str) -> Any:
    rec = await app.get_job(job_id)
    return rec if rec.state in states else None



# -- finding 8: a claim whose reply was lost is sent again with its claim id -------


async def test_a_claim_without_a_reply_is_sent_again_with_the_same_claim_id() -> None:
    from leasequeue.models import ClaimBatch
    from leasequeue.runtime.claimer import Claimer, ClaimerParams
    from leasequeue.runtime.dispatch import Dispatch
    from leasequeue.runtime.slots import Slots

    sent: list[str] = []

    class Scripts:
        async def claim(self, qk: Any, count: int, lease_ms: int, worker_id: str,
                        start_now: int, claim_id: str) -> ClaimBatch:
            sent.append(claim_id)
            if len(sent) == 1:  # it may have run in Redis: the reply is what was lost
                raise RedisUnavailable("redis://x", ConnectionError("reset"))
            return ClaimBatch(0, -1, [])

    params = ClaimerParams(redis=None, scripts=Scripts(), queues=["q"],  # type: ignore[arg-type]
                           keys=lambda q: _Keys(), slots=Slots(4),  # type: ignore[arg-type,return-value]
                           table=RunTable(30), lease_ms=30_000, worker_id="w",
                           limited_queues=frozenset())
    claimer = Claimer(params)
    dispatch = Dispatch()
    with pytest.raises(RedisUnavailable):
        await claimer._claim("q", 4, dispatch)
    await claimer._claim("q", 4, dispatch)
    await claimer._claim("q", 4, dispatch)
    assert sent[0] == sent[1] and sent[2] != sent[1]


async def _an_executor_and_the_claimer(scripts: Any, slots: Any, order: list[str],
                                       second_claim: anyio.Event) -> None:
    """One idle executor, then the claimer's loop over ``scripts`` (fakes that
    note each claim in ``order`` and set ``second_claim`` at the second) until
    its second claim is sent and every task is blocked; the executor notes
    the job it took in ``order``."""
    from leasequeue.runtime.claimer import Claimer, ClaimerParams
    from leasequeue.runtime.dispatch import Dispatch

    params = ClaimerParams(redis=None, scripts=scripts, queues=["q"],  # type: ignore[arg-type]
                           keys=lambda q: _Keys(), slots=slots,  # type: ignore[arg-type,return-value]
                           table=RunTable(30), lease_ms=30_000, worker_id="w",
                           limited_queues=frozenset(), blocking=False)
    dispatch = Dispatch()

    async def executor() -> None:
        run = await dispatch.get()
        order.append(f"took {run.job.id}")

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(executor)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(Claimer(params)._loop, dispatch)
            await second_claim.wait()
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()


async def test_jobs_handed_over_reach_their_executors_before_the_next_claim_is_sent() -> None:
    """The claimer yields after handing jobs over: an idle executor takes its
    job before the claimer prepares and sends its next claim (that claim's
    client work used to sit on every job's way to its handler)."""
    from leasequeue.models import ClaimBatch, ClaimedJob
    from leasequeue.runtime.slots import Slots

    order: list[str] = []
    second_claim = anyio.Event()

    class Scripts:
        async def claim(self, qk: Any, count: int, lease_ms: int, worker_id: str,
                        start_now: int, claim_id: str) -> ClaimBatch:
            order.append("claim")
            if len(order) > 1:
                second_claim.set()
            if len(order) == 1:
                return ClaimBatch(0, -1, [ClaimedJob("j1", "q", 1, 1, "n", b"", 0, 0, 0, 0, 0)])
            return ClaimBatch(0, -1, [])  # (a claim is shielded: it must return)

    await _an_executor_and_the_claimer(Scripts(), Slots(10), order, second_claim)
    assert order[:3] == ["claim", "took j1", "claim"]


async def test_in_a_backlog_the_next_claim_is_sent_before_the_batch_runs() -> None:
    """A claim that came back with all it asked for (a backlog) and room for
    another: the claimer sends the next claim before the executors run the
    batch, so Redis leases it while this one runs (yielding first, the woken
    executors ran the whole batch before the next claim was sent, and the
    worker and Redis took turns)."""
    from leasequeue.models import ClaimBatch, ClaimedJob
    from leasequeue.runtime.slots import Slots

    order: list[str] = []
    counts: list[int] = []
    second_claim = anyio.Event()

    class Scripts:
        async def claim(self, qk: Any, count: int, lease_ms: int, worker_id: str,
                        start_now: int, claim_id: str) -> ClaimBatch:
            order.append("claim")
            counts.append(count)
            if len(counts) == 1:  # a full batch: the queue has more
                return ClaimBatch(0, -1, [ClaimedJob(f"j{i}", "q", 1, 1, "n", b"", 0, 0, 0, 0,
                                                     0) for i in range(count)])
            second_claim.set()
            return ClaimBatch(0, -1, [])  # (a claim is shielded: it must return)

    slots = Slots(100)
    slots.ahead = 100  # a worker finishing fast: a batch may be claimed ahead
    slots.refresh_ahead = lambda: None  # type: ignore[method-assign]
    await _an_executor_and_the_claimer(Scripts(), slots, order, second_claim)
    assert counts[:2] == [100, 100]
    assert order[:3] == ["claim", "claim", "took j0"]


async def test_a_stop_during_a_claim_still_hands_its_jobs_over() -> None:
    """A claim is shielded: a stop that comes while it is on the wire waits for
    its reply, so the jobs it leased reach the dispatch (whose executors start
    them or give them back at shutdown) instead of staying leased to nobody
    until their lease runs out."""
    from leasequeue.models import ClaimBatch, ClaimedJob
    from leasequeue.runtime.claimer import Claimer, ClaimerParams
    from leasequeue.runtime.dispatch import Dispatch
    from leasequeue.runtime.slots import Slots

    on_the_wire, reply = anyio.Event(), anyio.Event()

    class Scripts:
        async def claim(self, qk: Any, count: int, lease_ms: int, worker_id: str,
                        start_now: int, claim_id: str) -> ClaimBatch:
            on_the_wire.set()
            await reply.wait()  # a stop comes meanwhile
            return ClaimBatch(0, -1, [ClaimedJob("j1", "q", 1, 1, "n", b"", 0, 0, 0, 0, 0)])

    params = ClaimerParams(redis=None, scripts=Scripts(), queues=["q"],  # type: ignore[arg-type]
                           keys=lambda q: _Keys(), slots=Slots(10),  # type: ignore[arg-type,return-value]
                           table=RunTable(30), lease_ms=30_000, worker_id="w",
                           limited_queues=frozenset(), blocking=False)
    dispatch = Dispatch()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(Claimer(params)._loop, dispatch)
            await on_the_wire.wait()
            tg.cancel_scope.cancel()
            reply.set()
    assert [run.job.id for run in dispatch._jobs] == ["j1"]


async def _sleeping_takers(dispatch: Any, count: int, taken: list[Any],
                           tg: Any) -> list[anyio.CancelScope]:
    """``count`` executors blocked in dispatch.get(), each in its own cancel
    scope, appending what they take to ``taken``."""
    from leasequeue.runtime.dispatch import Closed

    scopes = [anyio.CancelScope() for _ in range(count)]

    async def take(scope: anyio.CancelScope) -> None:
        with scope:
            try:
                taken.append(await dispatch.get())
            except Closed:
                taken.append("closed")

    for scope in scopes:
        tg.start_soon(take, scope)
    await anyio.wait_all_tasks_blocked()
    return scopes


async def test_a_job_handed_to_idle_executors_wakes_one_of_them() -> None:
    """One job for ten idle executors wakes one: the other nine stay blocked
    on the very futures they went to sleep on (none ran for nothing)."""
    from leasequeue.runtime.dispatch import Dispatch

    dispatch = Dispatch()
    taken: list[Any] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await _sleeping_takers(dispatch, 10, taken, tg)
            asleep = list(dispatch._sleepers)
            assert len(asleep) == 10 and dispatch.idle_takers == 10
            dispatch.put_many(["job-1"])  # type: ignore[list-item]
            assert dispatch.idle_takers == 9  # the woken one counts until it runs
            await anyio.wait_all_tasks_blocked()
            assert taken == ["job-1"]
            assert list(dispatch._sleepers) == asleep[1:]  # the oldest took it
            assert not any(sleeper.done() for sleeper in dispatch._sleepers)
            dispatch.put_many(["job-2", "job-3"])  # type: ignore[list-item]
            await anyio.wait_all_tasks_blocked()
            assert taken == ["job-1", "job-2", "job-3"] and len(dispatch._sleepers) == 7
            dispatch.close()  # every executor still blocked ends
    assert taken[3:] == ["closed"] * 7


async def test_a_batch_wakes_executors_only_as_it_keeps_them_busy() -> None:
    """A batch handed to ten idle executors wakes one; each executor that
    takes a job with more behind it wakes the next. Jobs that end at once
    (a no-op) are run by the few woken first, and the others stay asleep on
    the very futures they went to sleep on (woken one per job, most woke to
    an empty hand-off and slept again). Jobs that wait on I/O each get an
    executor of their own, with no further hand-off."""
    from leasequeue.runtime.dispatch import YIELD_EVERY, Dispatch

    dispatch = Dispatch()
    takers: dict[str, int] = {}
    io_done = anyio.Event()

    async def executor(n: int) -> None:
        while True:
            job = await dispatch.get()
            takers[job] = n  # type: ignore[index]
            if str(job).startswith("io"):
                await io_done.wait()

    quick = [f"quick-{i}" for i in range(3 * YIELD_EVERY)]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for n in range(10):
                tg.start_soon(executor, n)
            await anyio.wait_all_tasks_blocked()
            asleep = list(dispatch._sleepers)
            dispatch.put_many(quick)  # type: ignore[arg-type]
            await anyio.wait_all_tasks_blocked()
            assert sorted(takers) == sorted(quick)
            untouched = [f for f in dispatch._sleepers if f in asleep and not f.done()]
            assert len(untouched) >= 10 - 4, (len(untouched), len(set(takers.values())))
            dispatch.put_many(["io-1", "io-2", "io-3", "io-4", "io-5"])  # type: ignore[list-item]
            await anyio.wait_all_tasks_blocked()
            io_takers = [takers.get(f"io-{i}") for i in range(1, 6)]
            assert None not in io_takers and len(set(io_takers)) == 5, io_takers
            assert len(dispatch) == 0
            io_done.set()
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()


async def test_an_executor_woken_then_cancelled_passes_its_job_on() -> None:
    """The executor woken for a job is cancelled before it runs (a stop): the
    wake goes to the next one, so the job is not left waiting for the next
    hand-off. (An anyio cancel scope waits for such a task to run, so it
    takes its job first; asyncio's own cancel does not wait.) An executor
    cancelled while still blocked leaves nothing behind in the hand-off."""
    import asyncio

    from leasequeue.runtime.dispatch import Dispatch

    dispatch = Dispatch()
    taken: list[Any] = []

    async def take() -> None:
        taken.append(await dispatch.get())

    first, second = asyncio.ensure_future(take()), asyncio.ensure_future(take())
    await anyio.wait_all_tasks_blocked()
    dispatch.put_many(["job-1"])  # type: ignore[list-item]
    first.cancel()  # woken, not yet run
    with anyio.fail_after(5):
        await second
    assert first.cancelled() and taken == ["job-1"]
    assert dispatch._waiting == 0 and not dispatch._sleepers and not len(dispatch)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            scopes = await _sleeping_takers(dispatch, 2, taken, tg)
            scopes[0].cancel()  # still blocked
            await anyio.wait_all_tasks_blocked()
            assert len(dispatch._sleepers) == 1 and dispatch._waiting == 1
            dispatch.put_many(["job-2"])  # type: ignore[list-item]
    assert taken == ["job-1", "job-2"]


class _Keys:
    wake = "wake"


async def test_a_job_claimed_ahead_by_a_worker_that_died_keeps_its_only_attempt(
        real_app: App) -> None:
    """A killed worker's claimed-ahead buffer: the jobs were leased (not
    started) when it died. Their leases lapse; the reaper hands them back
    without charging an attempt, so a max_attempts=1 job still runs."""
    from tests.helpers import expire_lease

    app = real_app
    ran: list[int] = []

    @app.job(max_attempts=1)
    async def once(ctx: Context) -> None:
        ran.append(ctx.attempt)

    await app.enqueue("once", job_id="o")
    qk = app.keys("default")
    batch = await app.scripts.claim(qk, 1, 5000, "dead-worker", 0, "c-dead")
    assert [j.started for j in batch.jobs] == [False]
    await expire_lease(app, "default", "o")
    async with worker_running(app, reap_interval=0.1, reap_backoff=(0, 0)):
        rec = await eventually(lambda: _state(app, "o", "succeeded", "dead"))
    assert rec.state == "succeeded" and ran == [1]
    assert (rec.attempt, rec.infra_failures) == (1, 1)


# -- finding 5: the handler's definition decides the budgets ------------------------


async def test_a_producer_that_does_not_know_the_job_cannot_set_its_budget(
        redis_server: RedisProcess, prefix: str) -> None:
    producer = App(redis_server.url, prefix=prefix)  # no handlers: a producer-only App
    consumer = App(redis_server.url, prefix=prefix)
    runs: list[int] = []

    @consumer.job(max_attempts=1, backoff=fixed(0))
    async def fragile(ctx: Context) -> None:
        runs.append(ctx.attempt)
        raise ValueError("no")

    try:
        await producer.enqueue("fragile", job_id="f")
        async with worker_running(consumer):
            rec = await eventually(lambda: _state(consumer, "f", "dead"))
        # the producer's own Defaults (max_attempts=3) did not decide
        assert runs == [1] and (rec.reason, rec.attempt) == ("max-attempts", 1)
        assert rec.max_attempts is None  # stored "unset"
    finally:
        await producer.close()
        await consumer.close()

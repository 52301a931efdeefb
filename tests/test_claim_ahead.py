"""Claiming ahead at any concurrency (slots.py) and the give-back of what a
stalled worker holds (held.py): a worker of concurrency 1 running short jobs
claims them in batches, and the runs it holds behind a long run go back to
the queue, unstarted, for another worker."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.errors import RedisUnavailable
from leasequeue.models import ClaimedJob
from leasequeue.runtime.dispatch import Dispatch
from leasequeue.runtime.held import HOLD_MAX, HeldParams, HeldRuns
from leasequeue.runtime.runs import RunTable
from leasequeue.runtime.slots import AHEAD_MAX, Slots
from leasequeue.store.specs import ReleaseReply
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio


def _finishing(slots: Slots, jobs_per_s: int) -> None:
    """The slots' rate window, passed with ``jobs_per_s`` finished in it."""
    slots.completed += jobs_per_s // 10
    slots._rate = float(jobs_per_s)
    slots._rate_since = time.monotonic() - 0.1
    slots.refresh_ahead()


def test_a_fast_worker_holds_up_to_a_batch_ahead_at_any_concurrency() -> None:
    one = Slots(1)
    _finishing(one, 10_000)  # 200 jobs in the 20 ms horizon
    assert (one.ahead, one.free, one.idle) == (AHEAD_MAX, 1 + AHEAD_MAX, 1) == (100, 101, 1)
    wide = Slots(300)
    _finishing(wide, 10_000)
    assert 190 <= wide.ahead <= 200  # the horizon (20 ms of work), under the concurrency
    slow = Slots(1)
    _finishing(slow, 40)  # a job every 25 ms: none ahead
    assert slow.ahead == 0


def test_runs_given_back_do_not_count_as_finished() -> None:
    slots = Slots(1)
    slots.take(5)
    slots.give(4, finished=False)
    slots.give()
    assert (slots.in_use, slots.completed) == (0, 1)


class _Run:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_excess_goes_back_once_runs_waited_with_none_taken_newest_first() -> None:
    slots = Slots(1)
    slots.take(5)  # one running, four held; nothing finished: none ahead
    dispatch = Dispatch()
    dispatch.put_many([_Run(f"r{i}") for i in range(4)])  # type: ignore[misc]
    held = HeldRuns(HeldParams(None, None, None, slots))  # type: ignore[arg-type]
    filled = dispatch.filled_at
    assert held.due(dispatch, filled + 0.05) == 0  # waited less than HOLD_MAX
    assert held.due(dispatch, filled + HOLD_MAX + 0.01) == 4
    dispatch._taken += 1  # an executor took a run: the wait starts again
    assert held.due(dispatch, filled + HOLD_MAX + 0.02) == 0
    assert held.due(dispatch, filled + 2 * HOLD_MAX + 0.03) == 4
    slots.ahead = 3  # an allowance ahead keeps that many
    assert held.due(dispatch, filled + 2 * HOLD_MAX + 0.04) == 1
    taken: list[Any] = dispatch.take_back(3)
    assert [r.name for r in taken] == ["r3", "r2", "r1"]
    assert len(dispatch) == 1


class _Releases:
    """Scripts.release as held.py calls it: answers, or Redis down."""

    def __init__(self, down: bool) -> None:
        self.down = down
        self.sent: list[list[tuple[str, int]]] = []

    async def release(self, qk: Any, held: list[tuple[str, int]], delay_ms: int,
                      why: str) -> list[ReleaseReply]:
        self.sent.append(list(held))
        if self.down:
            raise RedisUnavailable("redis://127.0.0.1:1/0", ConnectionError("refused"))
        return [ReleaseReply.RELEASED] * len(held)


@pytest.mark.parametrize("down", [False, True])
async def test_runs_given_back_are_settled_or_kept_in_the_hand_off(down: bool) -> None:
    """One release call for the runs taken back: answered, they are settled
    and their slots freed (not counted as finished); Redis down, they are
    back in the hand-off as they were, slots still held."""
    table, slots, dispatch = RunTable(30.0), Slots(1), Dispatch()
    runs = table.claimed([ClaimedJob(f"j{i}", "q", 1, 1, "n", b"", 0, 0, 0, 0, 0)
                          for i in range(3)], time.monotonic())
    slots.take(4)  # one running elsewhere, three held
    dispatch.put_many(runs)
    releases = _Releases(down)
    held = HeldRuns(HeldParams(releases, lambda q: q, table, slots))  # type: ignore[arg-type]
    await held.give_back(dispatch, dispatch.take_back(3))
    assert releases.sent == [[("j2", 1), ("j1", 1), ("j0", 1)]]  # one call, newest first
    if down:
        assert [r.job.id for r in dispatch.take_back(3)][::-1] == ["j0", "j1", "j2"]
        assert (slots.in_use, held.given_back, len(table)) == (4, 0, 3)
    else:
        assert (len(dispatch), slots.in_use, slots.completed) == (0, 1, 0)
        assert (held.given_back, len(table)) == (3, 0)


async def test_a_worker_of_concurrency_one_claims_short_jobs_in_batches(
        real_app: App) -> None:
    app = real_app
    held: list[int] = []
    runs: dict[str, int] = {}
    count = 3000

    async def quick(ctx: Context) -> None:
        runs[ctx.job_id] = runs.get(ctx.job_id, 0) + 1
        held.append(worker.slots.in_use)

    app.job(quick)
    await app.enqueue_many([JobRequest("quick", job_id=f"q{i}") for i in range(count)])
    async with worker_running(app, concurrency=1) as worker:
        await eventually(lambda: len(runs) == count, what="every job run")
    assert set(runs.values()) == {1}
    # a run and up to AHEAD_MAX more held at once (it held 2 when capped at
    # the concurrency: a claim and an ack round trip for every job or two)
    assert 10 <= max(held) <= 1 + AHEAD_MAX, max(held)


async def test_runs_held_behind_a_long_run_go_back_for_another_worker(
        real_app: App) -> None:
    app = real_app
    release = anyio.Event()
    started = anyio.Event()
    attempts: dict[str, list[int]] = {}

    async def quick(ctx: Context) -> None:
        attempts.setdefault(ctx.job_id, []).append(ctx.attempt)

    async def long(ctx: Context) -> None:
        started.set()
        await release.wait()

    app.job(quick)
    app.job(long)
    await app.enqueue_many([JobRequest("quick", job_id=f"a{i}") for i in range(1500)]
                           + [JobRequest("long", job_id="long")]
                           + [JobRequest("quick", job_id=f"b{i}") for i in range(300)])
    async with worker_running(app, concurrency=1, lease=10.0) as first:
        with anyio.fail_after(20):
            await started.wait()
        # the runs it claimed ahead behind the long one go back: only the
        # long run stays leased, the rest wait in the queue
        await eventually(lambda: first.held.given_back > 0, what="runs given back")
        stats = await eventually(lambda: _leased_only_the_long_run(app), what="one lease")
        assert stats.ready == 300  # those given back, in line with those never claimed
        async with worker_running(app, concurrency=4):
            await eventually(lambda: all(f"b{i}" in attempts for i in range(300)),
                             what="the jobs behind the long run, run by the other worker")
        assert not release.is_set()  # all while the long run held the first worker
        release.set()
        await eventually(lambda: _finished(app, "long"), what="the long run finished")
    assert len(attempts) == 1800
    assert all(a == [1] for a in attempts.values())  # each run once: no attempt spent


async def _leased_only_the_long_run(app: App) -> Any:
    stats = await app.stats()
    return stats if stats.leased == 1 else None


async def _finished(app: App, job_id: str) -> bool:
    return (await app.get_job(job_id)).state == "succeeded"


async def test_an_idle_worker_s_wait_claims_for_its_executors_not_ahead(
        real_app: App) -> None:
    """The claim behind an idle wait asks for what the executors could start,
    not for what the worker held ahead while busy: two idle workers of
    concurrency 1 that drained short jobs each take one of two long ones,
    and neither has to give one back."""
    app = real_app
    done: list[str] = []
    started: dict[str, str] = {}
    release = anyio.Event()

    async def quick(ctx: Context) -> None:
        done.append(ctx.job_id)

    async def long(ctx: Context) -> None:
        started[ctx.job_id] = ctx.worker_id
        await release.wait()

    app.job(quick)
    app.job(long)
    async with worker_running(app, concurrency=1, lease=10.0, worker_id="w1") as w1, \
            worker_running(app, concurrency=1, lease=10.0, worker_id="w2") as w2:
        await app.enqueue_many([JobRequest("quick") for _ in range(3000)])
        await eventually(lambda: len(done) == 3000, what="the short jobs drained")
        await eventually(lambda: w1.claimer._wait_scope and w2.claimer._wait_scope,
                         what="both workers in their idle wait")
        await app.enqueue_many([JobRequest("long", job_id=f"l{i}") for i in range(2)])
        await eventually(lambda: len(started) == 2, what="both long jobs started")
        assert sorted(started.values()) == ["w1", "w2"]
        assert w1.held.given_back == w2.held.given_back == 0
        release.set()


async def test_only_runs_that_ran_count_in_the_finishing_rate(real_app: App) -> None:
    """A run skipped at its limit frees its slot without counting as work
    done: a key at its limit would otherwise have the worker claim ahead as
    fast as it sends runs back."""
    app = real_app
    release = anyio.Event()
    holding = anyio.Event()

    @app.job(max_concurrent=1, on_conflict="skip")
    async def hold(ctx: Context) -> None:
        holding.set()  # (its slot taken: the others meet it)
        await release.wait()

    await app.enqueue("hold", job_id="first")
    async with worker_running(app, concurrency=2) as worker:
        with anyio.fail_after(10):
            await holding.wait()
        await app.enqueue_many([JobRequest("hold", job_id=f"s{i}") for i in range(20)])
        await eventually(lambda: _all_skipped(app, 20), what="the others skipped")
        assert worker.slots.completed == 0  # twenty slots freed, no run ran to its end
        release.set()
        await eventually(lambda: _state_is(app, "first", "succeeded"), what="the first done")
        await eventually(lambda: worker.slots.completed == 1, what="one run counted")


async def _state_is(app: App, job_id: str, state: str) -> bool:
    return (await app.get_job(job_id)).state == state


async def _all_skipped(app: App, count: int) -> bool:
    return all([await _state_is(app, f"s{i}", "skipped") for i in range(count)])

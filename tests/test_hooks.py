"""Hooks around enqueue and runs, on a real redis-server with an in-process
worker: what each method sees for every way a run ends, headers carried in
the payload envelope, and a hook that raises in any position never changing
what happens to a job."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

import leasequeue as lq
from leasequeue import App, Context, PermanentError, TransientError, fixed
from leasequeue.hooks import HookSet
from leasequeue.models import ReapOutcome
from tests.helpers import eventually, expire_lease, worker_running

pytestmark = pytest.mark.anyio


class Recorder(lq.Hooks):
    """Records every call: (method, job id or queue, detail)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.settled: dict[str, list[lq.Settled]] = {}
        self.infos: dict[str, lq.RunInfo] = {}

    def before_enqueue(self, job: lq.EnqueueInfo) -> None:
        job.headers["tenant"] = "acme"
        self.calls.append(("before_enqueue", job.job_id, job.queue))

    def after_enqueue(self, job: lq.EnqueueInfo, result: lq.EnqueuedJob | None) -> None:
        self.calls.append(("after_enqueue", job.job_id, result and result.created))

    def before_run(self, run: lq.RunInfo) -> None:
        self.infos.setdefault(run.job_id, run)  # its first run
        self.calls.append(("before_run", run.job_id, run.attempt))

    def after_run(self, run: lq.RunInfo, returned: lq.Returned) -> None:
        self.calls.append(("after_run", run.job_id, returned.ok))

    def on_settled(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self.settled.setdefault(run.job_id, []).append(settled)
        self.calls.append(("on_settled", run.job_id, settled.end))

    def on_retry(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self.calls.append(("on_retry", run.job_id, settled.kind))

    def on_dead(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self.calls.append(("on_dead", run.job_id, settled.reason))

    def on_reaped(self, queue: str, outcome: ReapOutcome) -> None:
        self.calls.append(("on_reaped", queue, outcome.requeued))

    def of(self, job_id: str) -> list[tuple[str, Any]]:
        return [(m, d) for m, j, d in self.calls if j == job_id]


async def state(app: App, job_id: str, *states: str) -> bool:
    return (await app.get_job(job_id)).state in states


async def test_hooks_see_every_way_a_run_ends(real_app: App) -> None:
    app = real_app
    rec = app.add_hook(Recorder())
    assert isinstance(rec, Recorder)
    flaky_runs = 0

    @app.job
    async def ok(ctx: Context) -> int:
        return 1

    @app.job(max_attempts=2, backoff=fixed(0))
    async def broken(ctx: Context) -> None:
        raise ValueError("broken")

    @app.job(infra_backoff=fixed(0))
    async def flaky(ctx: Context) -> None:
        nonlocal flaky_runs
        flaky_runs += 1
        if flaky_runs == 1:
            raise TransientError("db down")

    @app.job
    def refuse(ctx: Context) -> None:  # a sync handler
        raise PermanentError("no such order")

    for name in ("ok", "broken", "flaky", "refuse"):
        await app.enqueue(name, job_id=name)
    await app.enqueue("nobody-handles-this", job_id="unknown", queue="default")
    async with worker_running(app):
        for job_id, end in (("ok", "succeeded"), ("broken", "dead"), ("flaky", "succeeded"),
                            ("refuse", "dead"), ("unknown", "dead")):
            await eventually(lambda j=job_id, e=end: state(app, j, e), what=job_id)
        await eventually(lambda: all(j in rec.settled for j in
                                     ("ok", "broken", "flaky", "refuse", "unknown")))

    assert rec.of("ok") == [("before_enqueue", "default"), ("after_enqueue", True),
                            ("before_run", 1), ("after_run", True),
                            ("on_settled", lq.RunEnd.SUCCEEDED)]
    assert [s.end for s in rec.settled["broken"]] == [lq.RunEnd.RETRIED, lq.RunEnd.DEAD]
    assert ("on_retry", "work") in rec.of("broken")
    assert ("on_dead", "max-attempts") in rec.of("broken")
    assert isinstance(rec.settled["broken"][-1].exception, ValueError)
    assert [(s.end, s.kind) for s in rec.settled["flaky"]] == [
        (lq.RunEnd.RETRIED, "infra"), (lq.RunEnd.SUCCEEDED, "")]
    assert ("on_dead", "permanent") in rec.of("refuse")
    assert isinstance(rec.settled["refuse"][0].exception, PermanentError)
    # a job buried before it ran is settled (never started, no before_run)
    assert rec.of("unknown")[-2:] == [("on_settled", lq.RunEnd.DEAD),
                                      ("on_dead", "unknown-job")]
    assert ("before_run", 1) not in rec.of("unknown")
    info = rec.infos["ok"]
    assert (info.name, info.queue, info.attempt, info.started, info.first_run) == (
        "ok", "default", 1, True, True)
    assert info.headers == {"tenant": "acme"}  # carried in the payload envelope
    assert info.wait_seconds is not None and 0 <= info.wait_seconds < 10
    assert info.run_seconds is not None and info.run_seconds >= 0
    assert rec.infos["flaky"].wait_seconds is not None  # its first run
    assert app.hooks.errors == 0


async def test_skipped_and_canceled_runs_are_settled_for_hooks(real_app: App) -> None:
    app = real_app
    rec = app.add_hook(Recorder())
    release = anyio.Event()

    @app.job(max_concurrent=1, on_conflict="skip")
    async def report(ctx: Context) -> None:
        await release.wait()

    @app.job
    async def long(ctx: Context) -> None:
        await anyio.sleep(30)

    await app.enqueue("report", job_id="first")
    await app.enqueue("long", job_id="long")
    async with worker_running(app):
        await eventually(lambda: state(app, "first", "leased"))
        await app.enqueue("report", job_id="second")
        await eventually(lambda: state(app, "second", "skipped"))
        await eventually(lambda: "long" in rec.infos)
        await app.cancel("long")
        await eventually(lambda: state(app, "long", "canceled"))
        release.set()
        await eventually(lambda: state(app, "first", "succeeded"))
        await eventually(lambda: {"first", "second", "long"} <= set(rec.settled))
    assert [s.end for s in rec.settled["second"]] == [lq.RunEnd.SKIPPED]
    assert [s.end for s in rec.settled["long"]] == [lq.RunEnd.CANCELED]
    assert [s.end for s in rec.settled["first"]] == [lq.RunEnd.SUCCEEDED]


async def test_on_reaped_reports_expired_leases(real_app: App) -> None:
    app = real_app
    rec = app.add_hook(Recorder())
    await app.enqueue("ghost", job_id="g", queue="default")
    claimed = await app.scripts.claim(app.keys("default"), 1, 60_000, "dead-worker", 1, "c1")
    assert [j.id for j in claimed.jobs] == ["g"]
    await expire_lease(app, "default", "g")
    async with worker_running(app, reap_interval=0.05):
        await eventually(lambda: ("on_reaped", "default", 1) in rec.calls)


async def test_enqueue_hooks_see_failures_and_batches(real_app: App) -> None:
    app = real_app
    rec = app.add_hook(Recorder())
    with pytest.raises(lq.PayloadNotSerializable):
        await app.enqueue("x", {"bad": object()}, job_id="bad", queue="default")
    assert rec.of("bad") == [("before_enqueue", "default"), ("after_enqueue", None)]
    jobs = await app.enqueue_many([lq.JobRequest("x", job_id="m1", queue="default"),
                                   lq.JobRequest("x", job_id="m2", queue="other")])
    assert [j.created for j in jobs] == [True, True]
    assert rec.of("m2") == [("before_enqueue", "other"), ("after_enqueue", True)]
    again = await app.enqueue("x", job_id="m1", queue="default")  # a job_id hit
    assert not again.created and rec.of("m1")[-1] == ("after_enqueue", False)
    stored = await app.get_job("m1", "default")
    assert stored.payload == {}  # headers do not leak into the handler's kwargs


async def test_enqueue_hooks_see_the_common_call(real_app: App) -> None:
    """The common call (a job's name and payload, nothing else) goes a
    short way while no hook asks for enqueues (App.enqueue's, through
    Producer.common): a hook added once that way is taken sees every later
    such call, before and after."""
    app = real_app

    @app.job
    async def plain(ctx: Context, n: int) -> None: ...

    before = await app.enqueue("plain", {"n": 1})  # no hook yet: the cached way
    rec = app.add_hook(Recorder())
    after = await app.enqueue("plain", {"n": 2})
    assert rec.of(before.id) == []
    assert rec.of(after.id) == [("before_enqueue", "default"), ("after_enqueue", True)]


class Raising(lq.Hooks):
    """Raises in exactly one method."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _maybe(self, method: str) -> None:
        if method == self.where:
            raise RuntimeError(f"hook bug in {method}")

    def before_enqueue(self, job: lq.EnqueueInfo) -> None:
        self._maybe("before_enqueue")

    def after_enqueue(self, job: lq.EnqueueInfo, result: lq.EnqueuedJob | None) -> None:
        self._maybe("after_enqueue")

    def before_run(self, run: lq.RunInfo) -> None:
        self._maybe("before_run")

    def after_run(self, run: lq.RunInfo, returned: lq.Returned) -> None:
        self._maybe("after_run")

    def on_settled(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self._maybe("on_settled")

    def on_retry(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self._maybe("on_retry")

    def on_dead(self, run: lq.RunInfo, settled: lq.Settled) -> None:
        self._maybe("on_dead")

    def on_reaped(self, queue: str, outcome: ReapOutcome) -> None:
        self._maybe("on_reaped")


@pytest.mark.parametrize("where", ["before_enqueue", "after_enqueue", "before_run",
                                   "after_run", "on_settled", "on_retry", "on_dead",
                                   "on_reaped"])
async def test_a_raising_hook_never_loses_a_job(real_app: App, where: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    app = real_app
    app.add_hook(Raising(where))
    after = app.add_hook(Recorder())  # hooks after the raising one still run

    @app.job
    async def ok(ctx: Context, n: int) -> int:
        return n

    @app.job(max_attempts=2, backoff=fixed(0))
    def broken(ctx: Context) -> None:
        raise ValueError("broken")

    # first in the queue: leased by a worker that died (reaped), then dead (no handler)
    await app.enqueue("ghost", job_id="ghost", queue="default")
    await app.scripts.claim(app.keys("default"), 1, 60_000, "dead-worker", 1, "c1")
    await expire_lease(app, "default", "ghost")
    for n in range(5):
        await app.enqueue("ok", {"n": n}, job_id=f"ok{n}")
    await app.enqueue("broken", job_id="broken")
    with caplog.at_level(logging.ERROR, logger="leasequeue"):
        async with worker_running(app, reap_interval=0.05):
            for n in range(5):
                await eventually(lambda n=n: state(app, f"ok{n}", "succeeded"))
            await eventually(lambda: state(app, "broken", "dead"))
            await eventually(lambda: state(app, "ghost", "dead"))
            await eventually(lambda: app.hooks.errors > 0, what=f"{where} raised")
    for n in range(5):
        assert (await app.get_job(f"ok{n}")).result == n
    dead = await app.get_job("broken")
    assert (dead.reason, dead.attempt) == ("max-attempts", 2)
    assert any(r.getMessage() == "hook failed; ignored" and r.fields["method"] == where
               for r in caplog.records)
    assert after.calls  # the next hook was called in every position


def test_add_hook_refuses_what_is_not_a_hook() -> None:
    app = App("memory://hooks-refuse")
    with pytest.raises(lq.ConfigError, match="Hooks instance"):
        app.add_hook(object())  # type: ignore[arg-type]
    assert not app.hooks.active


def test_methods_left_alone_are_not_called() -> None:
    class OnlyDead(lq.Hooks):
        def on_dead(self, run: lq.RunInfo, settled: lq.Settled) -> None: ...

    hooks = HookSet()
    hooks.add(OnlyDead())
    assert hooks.active and hooks.wants("on_dead")
    assert not hooks.wants("before_run") and not hooks.wants_enqueue

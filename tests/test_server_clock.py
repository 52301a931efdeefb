"""Invariant 3, server clock only: with the client clock a day off in either
direction, every instant the scripts write (lease expiry, due time, claim and
enqueue times) still comes from the Redis server's TIME."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from fakeredis.commands_mixins import server_mixin

from leasequeue import App
from tests.helpers import DEFAULT_BUDGET, START_ALL, new_claim_id, server_ms

pytestmark = pytest.mark.anyio

Q = "default"
DAY_S = 24 * 3600
REAL_TIME = time.time
REAL_TIME_NS = time.time_ns


@pytest.fixture(autouse=True)
def real_embedded_server_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """memory:// runs the server in this process; keep its TIME on the real clock
    so that skewing the client clock below really separates the two."""
    monkeypatch.setattr(server_mixin, "time", SimpleNamespace(time=REAL_TIME))


@contextmanager
def client_clock(monkeypatch: pytest.MonkeyPatch, offset_s: float) -> Iterator[None]:
    """The client's wall clock is off by offset_s while the block runs."""
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: REAL_TIME() + offset_s)
        m.setattr(time, "time_ns", lambda: REAL_TIME_NS() + int(offset_s * 1e9))
        yield


async def lease_expiry(app: App, job_id: str) -> int:
    score = await app.redis.zscore(app.keys(Q).leases, job_id)
    assert score is not None
    return int(score)


@pytest.mark.parametrize("skew_s", [DAY_S, -DAY_S])
async def test_claim_lease_expiry_from_server_time(app: App, monkeypatch: pytest.MonkeyPatch,
                                                   skew_s: int) -> None:
    await app.enqueue("j", queue=Q, job_id="a")
    with client_clock(monkeypatch, skew_s):
        before = await server_ms(app)
        assert abs(time.time() * 1000 - before) > DAY_S * 1000 / 2  # the skew is in force
        batch = await app.scripts.claim(app.keys(Q), 1, 30_000, "w", START_ALL, new_claim_id())
        after = await server_ms(app)
    assert [j.id for j in batch.jobs] == ["a"]
    assert before <= batch.now_ms <= after
    assert before + 30_000 <= await lease_expiry(app, "a") <= after + 30_000
    rec = await app.get_job("a")
    assert rec.claimed_ms is not None and before <= rec.claimed_ms <= after


@pytest.mark.parametrize("skew_s", [DAY_S, -DAY_S])
async def test_enqueue_due_time_from_server_time(app: App, monkeypatch: pytest.MonkeyPatch,
                                                 skew_s: int) -> None:
    with client_clock(monkeypatch, skew_s):
        before = await server_ms(app)
        await app.enqueue("j", queue=Q, job_id="later", delay=60)
        await app.enqueue("j", queue=Q, job_id="now")
        after = await server_ms(app)
        # neither is due yet by the server clock, whatever the client's clock says
        batch = await app.scripts.claim(app.keys(Q), 5, 30_000, "w", START_ALL, new_claim_id())
    assert [j.id for j in batch.jobs] == ["now"]
    assert 59_000 <= batch.next_due_in_ms <= 60_000
    due = await app.redis.zscore(app.keys(Q).scheduled, "later")
    assert due is not None and before + 60_000 <= due <= after + 60_000
    rec = await app.get_job("later")
    assert rec.due_ms == due
    assert rec.enqueued_ms is not None and before <= rec.enqueued_ms <= after


async def test_workers_with_opposite_skews_agree_on_leases(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="a")
    await app.enqueue("j", queue=Q, job_id="b")
    before = await server_ms(app)
    with client_clock(monkeypatch, DAY_S):
        ahead = (await app.scripts.claim(qk, 1, 30_000, "ahead", START_ALL, new_claim_id())).jobs[0]
    with client_clock(monkeypatch, -DAY_S):
        behind = (await app.scripts.claim(qk, 1, 30_000, "behind",
                                          START_ALL, new_claim_id())).jobs[0]
    after = await server_ms(app)
    for job in (ahead, behind):
        assert before + 30_000 <= await lease_expiry(app, job.id) <= after + 30_000

    # the worker whose clock runs a day ahead reaps nothing: no lease has expired
    with client_clock(monkeypatch, DAY_S):
        assert (await app.scripts.reap(qk, 100, 0, 0, {}, DEFAULT_BUDGET)).requeued == 0
    # the worker a day behind renews; its lease ends 60 s from server now, not a day ago
    with client_clock(monkeypatch, -DAY_S):
        renew_before = await server_ms(app)
        assert await app.scripts.renew(qk, [(behind.id, behind.token)], 60_000) == [1]
        renew_after = await server_ms(app)
    assert renew_before + 60_000 <= await lease_expiry(app, behind.id) <= renew_after + 60_000
    assert (await app.stats(Q)).leased == 2

"""Fencing at the edges the state machine does not reach: a job id that is
used again after its record was deleted (retention 0, expiry, purge), and an
ack batch that names the same run twice. A write that carries a token which
is no longer the current holder's must be refused, whatever happened to the
record in between."""

from __future__ import annotations

import pytest

from leasequeue import App
from tests.helpers import DEFAULT_BUDGET, START_ALL, expire_lease, new_claim_id

pytestmark = pytest.mark.anyio

Q = "default"


async def test_stale_token_from_a_deleted_incarnation_is_refused(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="x", max_attempts=5)
    stale = (await app.scripts.claim(qk, 1, 60_000, "a",
                                     START_ALL, new_claim_id())).jobs[0]  # token 1, then lost
    await expire_lease(app, Q, "x")
    await app.scripts.reap(qk, 10, 0, 0, {}, DEFAULT_BUDGET)
    second = (await app.scripts.claim(qk, 1, 60_000, "b",
                                      START_ALL, new_claim_id())).jobs[0]  # token 2
    assert await app.scripts.ack(qk, "succeeded", 0, [("x", second.token, b"", "")]) == [1]
    # retention 0: the record is gone, so the id can be enqueued again (a new job)
    assert (await app.enqueue("j", queue=Q, job_id="x")).created
    current = (await app.scripts.claim(qk, 1, 60_000, "c", START_ALL, new_claim_id())).jobs[0]
    # the first holder, which never learnt it lost the job, writes with its token
    assert await app.scripts.renew(qk, [("x", stale.token)], 60_000) == [0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("x", stale.token, b"", "")]) == [0]
    assert await app.scripts.ack(qk, "succeeded", 60_000, [("x", current.token, b"", "")]) == [1]


async def test_ack_batch_naming_a_run_twice_finishes_it_once(app: App) -> None:
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="d")
    job = (await app.scripts.claim(qk, 1, 60_000, "a", START_ALL, new_claim_id())).jobs[0]
    answers = await app.scripts.ack(qk, "succeeded", 60_000,
                                    [("d", job.token, b"", ""), ("d", job.token, b"", "")])
    assert answers == [1, 0]
    assert (await app.stats(Q)).counters["succeeded"] == 1

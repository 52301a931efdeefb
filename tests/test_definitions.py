"""The handler's definition decides a job's budgets (the producer stores
"unset" unless told otherwise), and settings that cannot work are refused
when they are declared, naming the option and the value."""

from __future__ import annotations

from typing import Any

import pytest

from leasequeue import App, Context, JobRequest
from leasequeue.app import UNSET_BUDGET

pytestmark = pytest.mark.anyio

Q = "default"


async def stored_budgets(app: App, job_id: str, queue: str = Q) -> tuple[int, int]:
    """max_attempts and max_infra as the job record in Redis holds them."""
    raw = await app.redis.hget(app.keys(queue).jobs, job_id)
    assert raw is not None
    fields = raw.decode().split("|")  # version|state|token|attempt|work|infra|max|max_infra|...
    return int(fields[6]), int(fields[7])


async def test_a_producer_only_app_stores_unset_budgets(app: App) -> None:
    await app.enqueue("theirs", job_id="a")
    await app.enqueue_many([JobRequest("theirs", job_id="b")])
    assert await stored_budgets(app, "a") == (UNSET_BUDGET, UNSET_BUDGET) == (0, 0)
    assert await stored_budgets(app, "b") == (0, 0)


async def test_a_registered_definition_is_not_copied_into_the_record(app: App) -> None:
    @app.job(max_attempts=5, max_infra_attempts=7)
    async def mine(ctx: Context) -> None: ...

    await app.enqueue("mine", job_id="a")
    # the worker that runs it applies its own definition, which may differ
    assert await stored_budgets(app, "a") == (0, 0)


async def test_explicit_budgets_are_stored(app: App) -> None:
    await app.enqueue("theirs", job_id="a", max_attempts=4)
    await app.enqueue("theirs", job_id="b", max_infra_attempts=2)
    await app.enqueue_many([JobRequest("theirs", job_id="c", max_attempts=1,
                                       max_infra_attempts=9)])
    assert await stored_budgets(app, "a") == (4, 0)
    assert await stored_budgets(app, "b") == (0, 2)
    assert await stored_budgets(app, "c") == (1, 9)


@pytest.mark.parametrize("option, value", [
    ("max_attempts", 0), ("max_attempts", -1), ("max_attempts", 2.5), ("max_attempts", True),
    ("max_attempts", "3"), ("max_infra_attempts", 0), ("max_infra_attempts", -3),
])
async def test_bad_explicit_budgets_are_refused(app: App, option: str, value: Any) -> None:
    from leasequeue.errors import ConfigError

    with pytest.raises(ConfigError, match=option):
        await app.enqueue("theirs", job_id="a", **{option: value})
    with pytest.raises(ConfigError, match=option):
        await app.enqueue_many([JobRequest("theirs", job_id="b", **{option: value})])
    assert await app.redis.hlen(app.keys(Q).jobs) == 0

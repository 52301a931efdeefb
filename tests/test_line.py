"""The place in line (lua/_lib.lua, LINE_FLOOR): a queued job of priority 0
waits in the queue's line (a LIST), every other queued job in the ready set
(a ZSET). Claims take both in one order; a job canceled in the line leaves a
stale entry that is not counted ready and does not answer a claim empty;
App.jobs pages both in claim order."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasequeue import App, JobRequest
from leasequeue.errors import ConfigError
from leasequeue.producer import MAX_PRIORITY
from leasequeue.store.record import LINE_FLOOR, PRIO_OFFSET, SEQ_SPAN
from leasequeue.store.specs import FailReply, ReleaseReply
from tests.helpers import START_ALL, fail_job, new_claim_id, ready_ids, server_ms

pytestmark = pytest.mark.anyio

Q = "default"
LIB = Path(__file__).resolve().parent.parent / "lua" / "_lib.lua"


async def claim(app: App, count: int = 1) -> list[str]:
    batch = await app.scripts.claim(app.keys(Q), count, 30_000, "w1", START_ALL, new_claim_id())
    return [j.id for j in batch.jobs]


async def line(app: App) -> list[str]:
    return [x.decode() for x in await app.redis.lrange(app.keys(Q).line, 0, -1)]


async def counter(app: App, name: str) -> int:
    return int(await app.redis.hget(app.keys(Q).stats, name) or 0)


def test_the_claim_order_constants_are_the_scripts() -> None:
    """record.py's PRIO_OFFSET, SEQ_SPAN and LINE_FLOOR are _lib.lua's, and
    the offset is the producer's priority bound."""
    lib = LIB.read_text()
    assert f"local PRIO_OFFSET = {PRIO_OFFSET}\n" in lib
    assert f"local SEQ_SPAN = {SEQ_SPAN} " in lib
    assert "local LINE_FLOOR = (PRIO_OFFSET + 1) * SEQ_SPAN " in lib
    assert PRIO_OFFSET == MAX_PRIORITY and LINE_FLOOR == (PRIO_OFFSET + 1) * SEQ_SPAN < 2 ** 53


@pytest.mark.parametrize("count", [1, 10])
async def test_claims_take_higher_priority_then_put_back_jobs_then_the_line_then_lower(
        app: App, count: int) -> None:
    """Priority above 0 first; then a priority-0 job released back to its
    place (its sequence number kept: the ready set), ahead of the line; the
    line in FIFO order; negative priorities last. One claim of many and
    claims of one take the same order."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    await app.enqueue("j", queue=Q, job_id="low", priority=-3)
    assert await claim(app) == ["a"]
    await app.enqueue("j", queue=Q, job_id="high", priority=2)
    token = (await app.get_job("a")).token
    assert await app.scripts.release(qk, [("a", token)], 0, "shutdown") == [
        ReleaseReply.RELEASED]
    assert await line(app) == ["b", "c"]  # the line holds priority 0 only
    assert sorted(x.decode() for x in await app.redis.zrange(qk.ready, 0, -1)) == [
        "a", "high", "low"]
    order = ["high", "a", "b", "c", "low"]
    assert await ready_ids(app, qk) == order
    assert (await app.stats(Q)).ready == 5
    got: list[str] = []
    while len(got) < 5:
        ids = await claim(app, count)
        assert ids
        got += ids
    assert got == order
    assert await claim(app) == [] and await ready_ids(app, qk) == []


async def test_a_retry_enters_the_line_behind_what_is_queued(app: App) -> None:
    """A work failure retried at once takes a new sequence number and the
    back of the line; a job released keeps its place ahead of it."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    assert await claim(app, 2) == ["a", "b"]
    a, b = (await app.get_job("a")).token, (await app.get_job("b")).token
    out = await fail_job(app, qk, "a", a, "work", "boom", "boom", 0)
    assert out.code == FailReply.RETRY and out.state == "queued"
    assert await line(app) == ["c", "a"]
    assert await app.scripts.release(qk, [("b", b)], 0, "shutdown") == [ReleaseReply.RELEASED]
    assert await ready_ids(app, qk) == ["b", "c", "a"]
    assert await claim(app, 3) == ["b", "c", "a"]


async def test_a_job_canceled_in_the_line_is_not_ready_and_does_not_empty_a_claim(
        app: App) -> None:
    """Its entry stays in the line (an LREM would be O(line)) and is counted
    stale: stats leave it out of ready at once, the claim that pops it pops
    another in its place and takes it off the count."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in ("a", "b", "c")])
    assert [await app.cancel(i, Q) for i in ("a", "b")] == ["canceled", "canceled"]
    st = await app.stats(Q)
    assert st.ready == 1 and "line_stale" not in st.counters
    assert await line(app) == ["a", "b", "c"] and await counter(app, "line_stale") == 2
    assert await claim(app, 1) == ["c"]  # not an empty answer with "c" still queued
    assert await line(app) == [] and await counter(app, "line_stale") == 0
    assert await counter(app, "garbage") == 2
    assert (await app.stats(Q)).ready == 0
    # a queued job put back at its place is in the ready set: canceled there, no stale entry
    await app.enqueue("j", queue=Q, job_id="d")
    assert await claim(app) == ["d"]
    token = (await app.get_job("d")).token
    await app.scripts.release(qk, [("d", token)], 0, "shutdown")
    assert await app.cancel("d", Q) == "canceled"
    assert await counter(app, "line_stale") == 0 and await ready_ids(app, qk) == []


async def _canceled_and_forgotten(app: App, job_id: str) -> None:
    """``job_id`` enqueued, canceled in the line (its entry stays, counted
    stale), and its record deleted once its retention ran out: the id is
    free again, its stale entry still in the line."""
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id=job_id)
    assert await app.cancel(job_id, Q) == "canceled"
    await app.redis.zadd(qk.done, {job_id: await server_ms(app) - 1}, xx=True)
    assert await app.scripts.expire(qk, 100) == 1
    assert await line(app) == [job_id] and await counter(app, "line_stale") == 1


@pytest.mark.parametrize("count", [1, 10])
async def test_an_id_enqueued_again_behind_its_stale_entry_is_leased_once(
        app: App, count: int) -> None:
    """Enqueued again, the id has two entries in the line, and its queued
    record makes both read as live: a claim takes the first as its run and
    the second as stale (it once leased the job twice in one call, two
    tokens, two runs). The count of stale entries stays true throughout."""
    await _canceled_and_forgotten(app, "x")
    await app.enqueue("j", queue=Q, job_id="x")
    assert await line(app) == ["x", "x"] and (await app.stats(Q)).ready == 1
    assert await claim(app, count) == ["x"]
    if count == 1:  # the second entry is popped by the next claim, as stale
        assert await claim(app, count) == []
    assert await line(app) == [] and await counter(app, "line_stale") == 0
    assert (await app.get_job("x")).state == "leased"


@pytest.mark.parametrize("count", [1, 10])
async def test_a_stale_line_entry_of_a_job_now_in_the_ready_set_is_not_its_run(
        app: App, count: int) -> None:
    """Enqueued again at a priority below 0, the id's home is the ready set,
    claimed after the line: its old line entry is stale even though its
    record is queued. The claim leases the job once, from its home, and
    takes the stale entry off the count (leased through the line entry, the
    count stayed one too high, and the next job in the line went uncounted
    in the stats)."""
    await _canceled_and_forgotten(app, "x")
    await app.enqueue("j", queue=Q, job_id="x", priority=-1)
    assert (await app.stats(Q)).ready == 1
    assert await claim(app, count) == ["x"]
    assert await line(app) == [] and await counter(app, "line_stale") == 0
    assert await ready_ids(app, app.keys(Q)) == []
    await app.enqueue("j", queue=Q, job_id="y")
    assert (await app.stats(Q)).ready == 1


async def test_a_claim_behind_many_stale_entries_stops_and_says_claim_again(app: App) -> None:
    """At most 8 pops a call in place of stale entries: behind more, the
    claim answers next_due 0 (claim again now, not idle) and nothing is lost."""
    await app.enqueue_many([JobRequest("j", job_id=f"s{i}", queue=Q) for i in range(20)])
    await app.enqueue("j", queue=Q, job_id="j")
    for i in range(20):
        assert await app.cancel(f"s{i}", Q) == "canceled"
    assert (await app.stats(Q)).ready == 1
    qk = app.keys(Q)
    for left in (12, 4):
        batch = await app.scripts.claim(qk, 1, 30_000, "w1", START_ALL, new_claim_id())
        assert batch.jobs == [] and batch.next_due_in_ms == 0
        assert len(await line(app)) == left + 1 and await counter(app, "line_stale") == left
    assert await claim(app) == ["j"]
    assert await counter(app, "line_stale") == 0 and await counter(app, "garbage") == 20


async def test_an_entry_of_the_layout_before_the_line_is_claimed_first(app: App) -> None:
    """Before the line, every queued job waited in the ready set. Such an
    entry of priority 0 (a queue filled by that code) has a lower sequence
    number than any job in the line, and is counted and claimed first."""
    qk = app.keys(Q)
    await app.enqueue("j", queue=Q, job_id="old")
    seq = await counter(app, "seq")
    assert await app.redis.lpop(qk.line) == b"old"  # where the old code put it
    await app.redis.zadd(qk.ready, {"old": PRIO_OFFSET * SEQ_SPAN + seq})
    await app.enqueue("j", queue=Q, job_id="new")
    assert (await app.stats(Q)).ready == 2
    assert await claim(app, 5) == ["old", "new"]


async def test_queued_jobs_page_in_claim_order_across_the_ready_set_and_the_line(
        app: App) -> None:
    """App.jobs("queued") walks the ready set above the line, the line, the
    ready set below it; a canceled job's entry is not listed; a cursor into
    the line holds when claims move the line (found again before its
    position), and starts at the front when its job was claimed."""
    qk = app.keys(Q)
    await app.enqueue_many([JobRequest("j", job_id=f"h{i}", queue=Q, priority=1)
                            for i in range(2)])
    await app.enqueue_many([JobRequest("j", job_id=f"l{i}", queue=Q) for i in range(6)])
    await app.enqueue("j", queue=Q, job_id="n", priority=-1)
    assert await app.cancel("l5", Q) == "canceled"

    async def walk(count: int) -> list[list[str]]:
        pages, cursor = [], None
        while True:
            records, cursor = await app.jobs(Q, "queued", cursor, count=count)
            pages.append([r.id for r in records])
            if cursor is None:
                return pages
    # (a page that filled its count hands a cursor on, though the next may be empty)
    assert await walk(3) == [["h0", "h1", "l0"], ["l1", "l2", "l3"], ["l4", "n"], []]
    assert await walk(100) == [["h0", "h1", "l0", "l1", "l2", "l3", "l4", "n"]]
    assert await ready_ids(app, qk) == ["h0", "h1", "l0", "l1", "l2", "l3", "l4", "l5", "n"]
    # a cursor in the line, then claims move the line under it
    first, cursor = await app.jobs(Q, "queued", None, count=4)
    assert [r.id for r in first] == ["h0", "h1", "l0", "l1"] and cursor is not None
    assert await claim(app, 3) == ["h0", "h1", "l0"]
    page, cursor = await app.jobs(Q, "queued", cursor, count=2)
    assert [r.id for r in page] == ["l2", "l3"]
    # the cursor's job (l3) claimed, with every job ahead of it: from the front
    assert await claim(app, 3) == ["l1", "l2", "l3"]
    page, cursor = await app.jobs(Q, "queued", cursor, count=5)
    assert [r.id for r in page] == ["l4", "n"] and cursor is None
    # a cursor made by hand at position 0 reads from the front, with no look for its id
    page, cursor = await app.jobs(Q, "queued", "0:L0:l3", count=5)
    assert [r.id for r in page] == ["l4", "n"] and cursor is None
    with pytest.raises(ConfigError):
        await app.jobs(Q, "queued", "0:L-1:l3")

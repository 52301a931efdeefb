"""Small helpers shared by tests: server time, forcing a lease or a due time
into the past relative to the server clock (no sleeping)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from leasequeue import App, Worker
from leasequeue.models import FailOutcome
from leasequeue.store.keys import QueueKeys
from leasequeue.store.record import LINE_FLOOR, PAYLOAD_MARK, parse_record, split_record
from leasequeue.store.scripts import Scripts


async def server_ms(app: App) -> int:
    sec, usec = await app.redis.time()
    return int(sec) * 1000 + int(usec) // 1000


async def stored_payloads(app: App, qk: QueueKeys, ids: list[str]) -> list[bytes | None]:
    """Each job's payload as stored: inside its record, else in the payloads hash."""
    raws = await app.redis.hmget(qk.jobs, ids)
    elsewhere = await app.redis.hmget(qk.payloads, ids)
    return [(split_record(raw)[1] if raw is not None else None) or other
            for raw, other in zip(raws, elsewhere, strict=True)]


async def plant_payload(app: App, qk: QueueKeys, job_id: str, data: bytes) -> None:
    """Replace a job's stored payload with `data` (a test's hostile bytes),
    inside its record, where a payload of up to 1024 bytes is kept."""
    fields = split_record(await app.redis.hget(qk.jobs, job_id))[0]
    await app.redis.hset(qk.jobs, job_id, fields + PAYLOAD_MARK + data)
    await app.redis.hdel(qk.payloads, job_id)


async def expire_lease(app: App, queue: str, job_id: str) -> None:
    """Make a lease look expired by the server clock."""
    qk = app.keys(queue)
    await app.redis.zadd(qk.leases, {job_id: await server_ms(app) - 1}, xx=True)


async def make_due(app: App, queue: str, job_id: str) -> None:
    qk = app.keys(queue)
    await app.redis.zadd(qk.scheduled, {job_id: await server_ms(app) - 1}, xx=True)


def ops(app: App) -> Scripts:
    return app.scripts


def in_claim_order(ranked: list[tuple[bytes, float]], line: list[bytes]) -> list[str]:
    """The ids of a ready set (with scores) and a line in claim order: the
    ready set below LINE_FLOOR, the line, the ready set's rest (lua/_lib.lua)."""
    first = [m.decode() for m, sc in ranked if sc < LINE_FLOOR]
    rest = [m.decode() for m, sc in ranked if sc >= LINE_FLOOR]
    return first + [x.decode() for x in line] + rest


async def ready_ids(app: App, qk: QueueKeys) -> list[str]:
    """The entries of a queue's ready set and line, in claim order."""
    return in_claim_order(await app.redis.zrange(qk.ready, 0, -1, withscores=True),
                          await app.redis.lrange(qk.line, 0, -1))


def ready_ids_sync(r: Any, qk: QueueKeys) -> list[str]:
    """ready_ids through a sync client."""
    return in_claim_order(r.zrange(qk.ready, 0, -1, withscores=True), r.lrange(qk.line, 0, -1))


async def all_keys_state(app: App, queue: str) -> dict[str, Any]:
    qk = app.keys(queue)
    r = app.redis
    return {
        "ready": await ready_ids(app, qk),
        "scheduled": [x.decode() for x in await r.zrange(qk.scheduled, 0, -1)],
        "leases": [x.decode() for x in await r.zrange(qk.leases, 0, -1)],
        "dead": [x.decode() for x in await r.zrange(qk.dead, 0, -1)],
        "done": sorted(x.decode() for x in await r.zrange(qk.done, 0, -1)),
    }


@asynccontextmanager
async def worker_running(app: App, **options: Any) -> AsyncIterator[Worker]:
    """An in-process Worker for the duration of the block, stopped gracefully after
    (within a short shutdown timeout, so a failing test does not wait long)."""
    options.setdefault("concurrency", 4)
    options.setdefault("lease", 2.0)
    options.setdefault("shutdown_timeout", 5.0)
    worker = Worker(app, **options)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        try:
            yield worker
        finally:
            worker.stop()


async def eventually(check: Callable[[], Any], limit: float = 10.0,
                     what: str = "condition") -> Any:
    """Await a (possibly async) condition until it is truthy, failing after ``limit`` s."""
    try:
        with anyio.fail_after(limit):
            while True:
                value = check()
                if hasattr(value, "__await__"):
                    value = await value
                if value:
                    return value
                await anyio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {limit}s waiting for {what}") from None


# -- script calls as the runtime makes them (every claimed run started) --------

START_ALL = 1_000_000  # claim's start_now: start every job the call leases
DEFAULT_BUDGET = (3, 10)  # reap's default (max_attempts, max_infra)


def new_claim_id() -> str:
    return uuid.uuid4().hex


async def fail_job(app: App, qk: QueueKeys, job_id: str, token: int, kind: str, reason: str,
                   error: str, delay_ms: int) -> FailOutcome:
    """scripts.fail with the job's own budgets, as a worker passes them."""
    raw = await app.redis.hget(qk.jobs, job_id)
    m = parse_record(raw) if raw else {"max_attempts": 0, "max_infra": 0}
    return await app.scripts.fail(qk, job_id, token, kind, reason, error, delay_ms,
                                  m["max_attempts"] or DEFAULT_BUDGET[0],
                                  m["max_infra"] or DEFAULT_BUDGET[1])


def in_forked_child(report: Callable[[], str]) -> str:
    """Run ``report`` in a forked child (os.fork: what a pre-forking server
    does) and return what it returned; the child never returns into pytest,
    and one that failed fails the caller with its report."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.write(write_end, report().encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    said = os.read(read_end, 1000).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0, said
    return said


def used_on_one_loop(url: str, prefix: str,
                     run: Callable[[Any], Any] | None = None) -> App:
    """An App with job "j", used on one event loop that is gone after it
    (``run``: asyncio.run unless given): job "a" enqueued, then its plain
    commands at once, so its pool keeps idle connections of that loop."""
    import asyncio

    app = App(url, prefix=prefix)
    app.job(lambda ctx: None, name="j")

    async def first() -> None:
        await app.enqueue("j", job_id="a")
        await asyncio.gather(app.queues(), app.get_job("a"), app.paused("default"))

    (run or asyncio.run)(first())
    return app


def used_on_two_loops(url: str, prefix: str) -> tuple[list[str], str, bool, bool]:
    """An App used on one event loop (used_on_one_loop), then on a new one
    (``asyncio.run`` twice): its plain commands and an enqueue there, and
    its close. What the second loop's calls answer: (queues, job a's state,
    paused, job b created)."""
    import asyncio
    import gc

    app = used_on_one_loop(url, prefix)

    async def again() -> tuple[list[str], str, bool, bool]:
        try:
            queues, job, paused, made = await asyncio.wait_for(asyncio.gather(
                app.queues(), app.get_job("a"), app.paused("default"),
                app.enqueue("j", job_id="b")), 5)
        finally:
            await asyncio.wait_for(app.close(), 5)
        return queues, job.state, paused, made.created

    answers = asyncio.run(again())
    gc.collect()  # (the old loop's transports, in the caller's test and its filters)
    return answers


def forked_mid_step(loop: Any, child: Callable[[], str]) -> str:
    """in_forked_child(child), forked from a task's step of ``loop``: in the
    child that loop is a copy mid-step, whose task the child still sees as
    current, so only the fork itself tells its connections apart."""
    async def fork() -> str:
        return in_forked_child(child)

    result: str = loop.run_until_complete(fork())
    return result

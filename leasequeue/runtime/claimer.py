"""Claims up to the free slots in one script call per queue and hands the
jobs to the executors; when there is nothing to claim it blocks on the
queues' wake lists instead of polling."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis

from ..errors import RedisUnavailable, ScriptError
from ..log import get_log
from ..models import ClaimBatch
from ..store.direct import Lane
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from .dispatch import Dispatch
from .runs import RunTable
from .scopes import new_scope
from .slots import Slots
from .waker import Waker

MAX_BATCH = 100
BATCH_WINDOW = 0.002  # how long a partly free worker waits to claim a bigger batch
IDLE_POLL = 1.0  # the longest an idle worker blocks before it claims anyway


@dataclass(frozen=True, slots=True)
class ClaimerParams:
    redis: Redis
    scripts: Scripts
    queues: Sequence[str]  # physical queues, claimed in rotation
    keys: Callable[[str], QueueKeys]
    slots: Slots
    table: RunTable
    lease_ms: int
    worker_id: str
    limited_queues: frozenset[str]  # runs there may wait for a slot: never started at claim
    blocking: bool = True  # False for memory:// (fakeredis cannot block)
    cluster: bool = False
    lane: Lane | None = None  # the scripts' lane (one Redis): the wake-up BLPOP takes it


class Claimer:
    def __init__(self, params: ClaimerParams) -> None:
        self._p = params
        self._queues = list(params.queues)
        self._keys = params.keys
        self._slots = params.slots
        self._waker = Waker(params.redis, [params.keys(q).wake for q in params.queues],
                            one_call=not params.cluster, lane=params.lane)
        self._turn = 0
        self._warned_at = 0.0
        # a claim whose reply never came is sent again with the same id: if it
        # ran, Redis answers with the jobs it leased then instead of new ones
        self._unanswered: dict[str, str] = {}
        # unique per process (a restarted worker with the same id must not
        # meet its earlier life's claim record), cheap per claim
        self._claim_prefix = f"{uuid.uuid4().hex[:12]}."
        self._claims = itertools.count(1)
        self._log = get_log("claimer", worker_id=params.worker_id)
        # one queue on one Redis: an idle wait carries the next claim behind it
        # (Scripts.wait_then_claim), and the worker's own wake list ends it
        self._pipelined = (params.lane is not None and params.blocking and not params.cluster
                           and len(self._queues) == 1)
        self._own_wake = (params.keys(self._queues[0]).wake_own(params.worker_id)
                          if self._pipelined else "")
        self._wait_scope: anyio.CancelScope | None = None  # the idle wait in flight

    async def run(self, dispatch: Dispatch) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._waker.run)
            await self._loop(dispatch)

    async def _loop(self, dispatch: Dispatch) -> None:
        backoff = 0.1
        threshold = max(1, min(self._slots.size // 2, MAX_BATCH // 2))
        # the claim behind a wait came back short (the line held fewer jobs
        # than it asked for, none included): its next due
        claimed_short: int | None = None
        while True:
            self._slots.refresh_ahead()
            await self._slots.wait_free()
            if self._slots.free < threshold:
                with anyio.move_on_after(BATCH_WINDOW):
                    await self._slots.wait_free(threshold)
            try:
                backlog = False
                if claimed_short is not None:
                    # the claim behind the wait just ran and emptied the line
                    # (what it found is handed over): it was this round's
                    # claim, and the wait is next. A job enqueued since left
                    # a token that ends that wait at once; a claim sent now
                    # would find nothing, a Redis call per job that trickles in
                    got, next_due_ms, claimed_short = 0, claimed_short, None
                else:
                    got, next_due_ms, backlog = await self._claim_round(dispatch)
                # the claim itself was shielded: a stop that came meanwhile lands
                # here, after its jobs were handed over (and will be released).
                # With jobs handed over, yield: their executors start them before
                # this loop prepares and sends its next claim (a job's way to its
                # handler would otherwise wait behind that claim's client work).
                # Not when the claim came back full and there is room for the next
                # one: a backlog, where the next claim is sent now, so that Redis
                # leases it while this batch runs (the woken executors would
                # otherwise run the whole batch first, and the worker and Redis
                # would take turns)
                if got and not (backlog and self._slots.free >= threshold):
                    await anyio.lowlevel.checkpoint()
                else:
                    await anyio.lowlevel.checkpoint_if_cancelled()
                if not got:
                    woken, claimed_short = await self._idle(next_due_ms, dispatch)
                    if woken:  # (their executors started them: _wait_then_claim)
                        await anyio.lowlevel.checkpoint_if_cancelled()
                backoff = 0.1
            except (RedisUnavailable, ScriptError) as exc:
                # bounded reconnect rate: at most a few attempts per second
                self._log.warning("claim failed; backing off", error=str(exc), retry_in=backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _claim_round(self, dispatch: Dispatch) -> tuple[int, int, bool]:
        """One claim per queue (rotating the first one for fairness). A queue
        whose Redis fails is skipped this round, so one shard in a failover does
        not stall the others; only when every queue failed does the error rise
        (and the claimer back off). Returns (jobs handed over, the next due in
        ms or -1, whether a claim came back with all it asked for)."""
        got = 0
        backlog = False
        next_due = -1
        n = len(self._queues)
        self._turn = (self._turn + 1) % n
        failure: Exception | None = None
        failed = 0
        for i in range(n):
            free = self._slots.free
            if free <= 0:
                break
            queue = self._queues[(self._turn + i) % n]
            count = min(free, MAX_BATCH)
            try:
                batch, sent_at = await self._claim(queue, count, dispatch)
            except (RedisUnavailable, ScriptError) as exc:
                failure, failed = exc, failed + 1
                continue
            if batch.next_due_in_ms >= 0 and (next_due < 0 or batch.next_due_in_ms < next_due):
                next_due = batch.next_due_in_ms
            if batch.jobs:
                self._slots.take(len(batch.jobs))
                # renewed from now on, started or not
                dispatch.put_many(self._p.table.claimed(batch.jobs, sent_at))
                got += len(batch.jobs)
                backlog = backlog or len(batch.jobs) == count
        if failure is not None and failed == n:
            raise failure
        if failure is not None and time.monotonic() - self._warned_at > 5:
            self._warned_at = time.monotonic()  # at most a line every 5 s
            self._log.warning("claim failed on a queue; the others go on", error=str(failure))
        return got, next_due, backlog

    async def _claim(self, queue: str, count: int,
                     dispatch: Dispatch) -> tuple[ClaimBatch, float]:
        """One claim call. The jobs that idle executors will start at once are
        marked started by the claim itself; the rest (claimed ahead, or in a
        queue whose runs may wait for a limiter slot) are marked when they
        start, so a lost reply or a killed worker's buffer costs no attempt."""
        claim_id = self._claim_id(queue)
        start_now = 0 if queue in self._p.limited_queues else dispatch.idle_takers
        sent_at = time.monotonic()
        # shielded: a claim cancelled on the wire (shutdown) would still lease
        # its jobs in Redis, to nobody; the socket timeout bounds it
        with new_scope(shield=True):
            batch = await self._p.scripts.claim(self._keys(queue), count, self._p.lease_ms,
                                                self._p.worker_id, start_now, claim_id)
        del self._unanswered[queue]
        return batch, sent_at

    def _claim_id(self, queue: str) -> str:
        """The id of the next claim on ``queue``: the unanswered one's again (its
        reply was lost: Redis answers with the jobs it leased), else a new one."""
        claim_id = self._unanswered.get(queue) or f"{self._claim_prefix}{next(self._claims)}"
        self._unanswered[queue] = claim_id
        return claim_id

    async def _idle(self, next_due_ms: int, dispatch: Dispatch) -> tuple[int, int | None]:
        """Wait for a wake token (or the next due job, at most IDLE_POLL).
        With the claim pipelined behind the wait: (the jobs it handed over,
        its next due when it came back with fewer jobs than it asked for, else
        None); else (0, None)."""
        timeout = IDLE_POLL if next_due_ms < 0 else min(IDLE_POLL, next_due_ms / 1000.0)
        if timeout <= 0:
            return 0, None
        if not self._p.blocking:
            await anyio.sleep(min(timeout, 0.01))
            return 0, None
        if self._pipelined and self._slots.idle > 0:
            # at most a quarter lease: the claim's lease is dated from the send
            # (a safe underestimate), so a run it leases arrives with at least
            # three quarters of its lease left by this worker's clock
            block_for = min(timeout, self._p.lease_ms / 4000)
            return await self._wait_then_claim(max(block_for, 0.01), dispatch)
        await self._waker.wait(max(timeout, 0.01))
        return 0, None

    async def _wait_then_claim(self, block_for: float,
                               dispatch: Dispatch) -> tuple[int, int | None]:
        """The idle wait with the next claim behind it on one connection: Redis
        runs the claim as the wait ends, so a job enqueued meanwhile reaches
        this worker leased, with no claim round trip after the wake-up.
        Shielded like any claim (a stop ends it through interrupt()); its
        count is this moment's idle executors (Slots.idle), never what the
        worker may hold ahead: that is what it finished lately, and the
        claim may run long after, when a burst comes (a worker of
        concurrency 1 would take up to 101 jobs of it, long ones too). Its
        runs count as claimed when its reply came (their lease as confirmed
        at the send)."""
        queue = self._queues[0]
        qk = self._keys(queue)
        claim_id = self._claim_id(queue)
        count = min(self._slots.idle, MAX_BATCH)
        sent_at = time.monotonic()  # the lease starts later (at the wake): a safe underestimate
        self._wait_scope = new_scope(shield=True)
        batch: ClaimBatch | None = None
        got = 0
        try:
            with self._wait_scope:
                # start_now 0: none of its runs is marked started by the claim,
                # so a worker that froze or lost its network while it waited
                # (the claim runs anyway, when the wait times out or a token
                # comes) is charged no attempt: its jobs are reaped unstarted
                # after a lease. The executors mark them as they start
                batch = await self._p.scripts.wait_then_claim(
                    qk, [qk.wake, self._own_wake], block_for, count,
                    self._p.lease_ms, self._p.worker_id, 0, claim_id)
                self._wait_scope = None  # the wait is over: nothing for interrupt() to end
                del self._unanswered[queue]
                got = len(batch.jobs)
                if got:
                    self._slots.take(got)
                    dispatch.put_many(self._p.table.claimed(batch.jobs, sent_at,
                                                            time.monotonic()))
                    # their executors start them now, before this scope's exit
                    # and the way back to the claim loop: an idle worker's job
                    # reaches its handler about 16 µs sooner at p50
                    # (DESIGN-NOTES.md, "An idle worker's hand-off"). A stop
                    # that comes meanwhile lands at the loop's next check, as
                    # one during the claim does
                    await asyncio.sleep(0)
        finally:
            self._wait_scope = None
        if batch is None:  # interrupt() cancelled the wait (the worker stops)
            raise RedisUnavailable("(own wake list)", RuntimeError("a stop cancelled the wait"))
        short = batch.next_due_in_ms if got < count else None
        return got, short

    async def interrupt(self) -> None:
        """End an idle wait now (the worker is stopping): a token on this
        worker's own wake list, which no other worker blocks on. When that
        cannot be sent within half a second (Redis unreachable), the wait is
        cancelled where it is (its connection dropped)."""
        scope = self._wait_scope
        if scope is None:
            return
        try:
            with anyio.fail_after(0.5):
                pipe = self._p.redis.pipeline(transaction=False)
                pipe.rpush(self._own_wake, "1")
                pipe.pexpire(self._own_wake, 10_000)  # a token the wait did not take expires
                await pipe.execute()
        except Exception as exc:
            self._log.warning("could not end the idle wait with a token; cancelling it",
                              error=str(exc))
            scope.cancel()

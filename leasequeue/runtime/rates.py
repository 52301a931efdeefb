"""Rate limits for one worker: which budgets a run draws from (its queue's
rate, its job's rates, named ones, each maybe keyed per payload), taking a
start from each before the run starts, and pushing a key back when a
handler raises RateLimited. A start taken is spent: nothing is held across
the run, so nothing is renewed. It never settles jobs (the executor does).

No spinning: a run over a rate is not refused but given a reservation, the
instant its start is due, and the executor schedules the job to that
instant; when it comes back the reservation is redeemed. A backlog of N
jobs costs O(N) calls in all, one interval apart, never a retry loop."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio

from ..errors import RedisUnavailable, ScriptError
from ..limiter import Limiter
from ..log import get_log
from ..rate import Rate
from ..registry import JobDefinition
from ..store.shards import logical
from ..store.specs import RateReply
from .runs import RunRecord

# a start due this soon is waited for in place (then redeemed with one more
# call) rather than through the queue (release, promote, claim: 3 calls)
WAIT_IN_PLACE = 0.05
# runs asking the same key within this window share one script call
# (measured: one call per run made a drain under a rate it never reached 4-5x slower)
GATHER = 0.001
# starts granted ahead (rate.lua grants them only while half the burst stays
# free): spent on this worker's next runs of the key within POOL_TTL, with
# no call; what is left then is given back. A grant running low is topped
# up by the run that finds it half spent (its leftovers ride on the new
# grant's time: a start is spent within 2 * POOL_TTL of its grant at most).
# At most POOL_MAX at once, sized at twice what the key used from its last
# grant plus the batch asking now (never over half the burst: rate.lua's rule)
POOL_TTL = 0.05
POOL_MAX = 256
POOL_MIN_BURST = 16  # a smaller burst is counted start by start, never ahead
MAX_POOLS = 1024  # keys with a grant held at once; past it, expired grants lapse


class _Batch:
    """Runs waiting for one call of rate.lua on one key."""

    __slots__ = ("answers", "done", "error", "holders")

    def __init__(self) -> None:
        self.holders: list[str] = []
        self.answers: list[tuple[RateReply, int]] = []
        self.error: Exception | None = None
        self.done = anyio.Event()


class _Pool:
    """Starts of one key granted ahead to this worker."""

    __slots__ = ("left", "refilling", "size", "until")

    def __init__(self, size: int, until: float) -> None:
        self.left = size
        self.size = size
        self.until = until  # monotonic: spend by then (counted from the call's send)
        self.refilling = False


def queue_rate_name(queue: str) -> str:
    return f"queue.{queue}"


def job_rate_name(job: str) -> str:
    return f"job.{job}"


@dataclass(frozen=True, slots=True)
class RateUse:
    """One budget a run draws from: a limit name, its rendered key (None =
    one budget for all) and the numbers."""

    name: str
    key: str | None
    rate: Rate

    @property
    def label(self) -> str:
        return self.name if self.key is None else f"{self.name}:{self.key}"


class Wait(StrEnum):
    RESERVED = "reserved"  # over the rate: its start is reserved, wait_s from now
    DENIED = "denied"  # over the rate, nothing reserved (on_conflict=skip)
    UNAVAILABLE = "unavailable"  # the limiter's Redis did not answer: no start


@dataclass(frozen=True, slots=True)
class NotNow:
    why: Wait
    wait_s: float
    use: RateUse


@dataclass(frozen=True, slots=True)
class RatesParams:
    limiter: Limiter
    queue_rates: Mapping[str, Rate]
    prefix: str  # the queue prefix: a reservation says where its job lives


def rate_uses(definition: JobDefinition, queue: str, queue_rates: Mapping[str, Rate],
              payload: Mapping[str, Any]) -> list[RateUse]:
    """The budgets a run of ``definition`` on ``queue`` draws from: its
    queue's rate, then its own; LimitKeyError when a key cannot be rendered."""
    rates = []
    queue = logical(queue)
    if queue in queue_rates:
        rates.append((queue_rate_name(queue), queue_rates[queue]))
    for rate in definition.rate:
        rates.append((rate.name or job_rate_name(definition.name), rate))
    return [RateUse(name, None if r.limit_key is None else r.limit_key.render(payload), r)
            for name, r in rates]


def park_group(uses: list[RateUse]) -> str:
    """The rate key a claim may park a job by (lua/claim.lua): its first
    keyed budget (a tenant's); "" for none. The producer stores it with the
    job; the worker parks it when that key is over its rate. A budget without
    a key is never a park group: every job of its queue or job type draws on
    it, so a per-queue estimate of its next start would only compete with
    its reservations (measured: starts a second swung by 5 % for seconds);
    and a single budget has no other keys to be fair to."""
    for use in uses:
        if use.key is not None:
            return use.label
    return ""


class Rates:
    def __init__(self, params: RatesParams) -> None:
        self._limiter = params.limiter
        self.queue_rates = dict(params.queue_rates)
        self._prefix = params.prefix
        self._log = get_log("rates")
        self._warned_at = 0.0
        self._batches: dict[tuple[str, str | None, str], _Batch] = {}
        self._pools: dict[tuple[str, str | None], _Pool] = {}
        self._static: dict[tuple[int, str], list[RateUse]] = {}

    def applies(self, definition: JobDefinition, queue: str) -> bool:
        return bool(definition.rate) or logical(queue) in self.queue_rates

    def limited_queue(self, queue: str, definitions: list[JobDefinition]) -> bool:
        return logical(queue) in self.queue_rates or any(
            d.rate for d in definitions if d.queue == logical(queue))

    def uses(self, definition: JobDefinition, queue: str,
             payload: Mapping[str, Any]) -> list[RateUse]:
        """The budgets of one run; LimitKeyError when a key cannot be rendered.
        Budgets with no key are the same for every run: made once."""
        static = self._static.get((id(definition), queue))
        if static is not None:
            return static
        uses = rate_uses(definition, queue, self.queue_rates, payload)
        if all(u.key is None for u in uses):
            # (the definition is kept alive by the registry, so its id stays its own)
            self._static[(id(definition), queue)] = uses
        return uses

    def holder(self, run: RunRecord) -> str:
        """Who holds a reservation: the job, wherever and whenever it is claimed."""
        return f"{self._prefix}/{run.job.queue}/{run.job.id}"

    async def take(self, run: RunRecord, uses: list[RateUse], reserve: bool) -> NotNow | None:
        """A start from every budget (None: start now), or the first budget
        over its rate (the starts taken from the others are given back).
        ``reserve``: reserve the next free instant (else only look)."""
        holder = ""  # made on the first call: a start granted ahead needs none
        taken: list[RateUse] = []
        for use in uses:
            try:
                pool = self._ahead(use)
                if pool is not None:
                    pool.left -= 1  # a start granted ahead: no call, no wait
                    taken.append(use)
                    if pool.left < pool.size // 2 and not pool.refilling:
                        await self._refill(use, pool)  # this run waits; the others go on
                    continue
                holder = holder or self.holder(run)
                code, wait_us = await self._call(use, holder, "take" if reserve else "try")
                if code is RateReply.WAIT and wait_us <= WAIT_IN_PLACE * 1e6:
                    await anyio.sleep(wait_us / 1_000_000)
                    code, wait_us = await self._call(use, holder, "take")
            except (RedisUnavailable, ScriptError) as exc:
                self._warn(use, exc)
                await self._refund(holder or self.holder(run), taken)
                return NotNow(Wait.UNAVAILABLE, 0.0, use)
            if code is RateReply.TAKEN:
                taken.append(use)
                continue
            await self._refund(holder or self.holder(run), taken)
            why = Wait.RESERVED if code is RateReply.WAIT else Wait.DENIED
            return NotNow(why, wait_us / 1_000_000, use)
        return None

    async def _call(self, use: RateUse, holder: str, mode: str) -> tuple[RateReply, int]:
        """This holder's answer, from a call shared with the runs that ask the
        same key in the same GATHER window (the first one sends it)."""
        slot = (use.name, use.key, mode)
        batch = self._batches.get(slot)
        if batch is not None:
            batch.holders.append(holder)
            index = len(batch.holders) - 1
            await batch.done.wait()
        else:
            batch = self._batches[slot] = _Batch()
            batch.holders.append(holder)
            index = 0
            with anyio.CancelScope(shield=True):  # the others wait on this call
                await anyio.sleep(GATHER)
                del self._batches[slot]
                try:
                    await self._lead(use, mode, batch)
                except (RedisUnavailable, ScriptError) as exc:
                    batch.error = exc
                finally:
                    batch.done.set()
        if batch.error is not None:
            raise batch.error
        return batch.answers[index]

    async def _lead(self, use: RateUse, mode: str, batch: _Batch) -> None:
        """Send a batch's call; a take or try also asks for starts ahead, and
        gives back the unspent ones of an expired grant."""
        ahead = 0
        live = self._pools.get((use.name, use.key))
        if live is not None and (live.refilling or self._ahead(use) is not None):
            pass  # a top-up is on its way or has landed meanwhile: answer the batch only
        elif mode != "refund" and use.rate.effective_burst >= POOL_MIN_BURST:
            old = self._pools.pop((use.name, use.key), None)
            used = 0
            if old is not None:
                used = old.size - old.left
                if old.left > 0:  # expired unspent: the key gets them back
                    try:  # (sent once: a refund that fails leaves them spent, as _refund)
                        await self._limiter.rates.call(
                            use.name, use.key, ["ahead"] * old.left, use.rate.interval_us,
                            use.rate.tolerance_us, "refund")
                    except (RedisUnavailable, ScriptError) as exc:
                        self._warn(use, exc)
            ahead = min(POOL_MAX, 2 * (used + len(batch.holders)))
        sent_at = time.monotonic()
        answer = await self._limiter.rates.call(
            use.name, use.key, batch.holders, use.rate.interval_us,
            use.rate.tolerance_us, mode, ahead=ahead)
        batch.answers = answer.answers
        if answer.ahead > 0:
            if len(self._pools) >= MAX_POOLS:  # keys gone idle: their few starts lapse
                now = time.monotonic()
                self._pools = {k: p for k, p in self._pools.items() if p.until > now}
            self._pools[(use.name, use.key)] = _Pool(answer.ahead, sent_at + POOL_TTL)

    def _ahead(self, use: RateUse) -> _Pool | None:
        """This worker's grant of starts ahead for the key, if it has one to
        spend now. (A run back for its reservation may spend one too; its
        reservation then lapses unused: the key errs on the safe side.)"""
        pool = self._pools.get((use.name, use.key))
        if pool is not None and pool.left > 0 and time.monotonic() < pool.until:
            return pool
        return None

    async def _refill(self, use: RateUse, pool: _Pool) -> None:
        """More starts ahead for a key whose grant runs low (demand is high):
        one call with no holder; the leftovers ride on the new grant's time."""
        pool.refilling = True
        sent_at = time.monotonic()
        try:
            answer = await self._limiter.rates.call(
                use.name, use.key, [], use.rate.interval_us, use.rate.tolerance_us, "take",
                ahead=min(POOL_MAX, 2 * pool.size))
        except (RedisUnavailable, ScriptError):
            return  # the grant in hand is spent as it is; then calls as usual
        finally:
            pool.refilling = False
        if answer.ahead > 0:
            pool.left += answer.ahead
            pool.size = pool.left
            pool.until = sent_at + POOL_TTL

    async def push_back(self, run: RunRecord, uses: list[RateUse], retry_after: float,
                        limit: str | None) -> float | None:
        """A handler was told "too many": push the keys back by ``retry_after``
        for everyone (only the limit named ``limit``, if given) and reserve
        this run's next start. Returns how long the run waits (None: the
        limiter did not answer)."""
        holder = self.holder(run)
        wait: float | None = None
        for use in uses:
            if limit is not None and limit not in (use.name, use.rate.name):
                continue
            # this worker's starts granted ahead are dropped: none starts
            # before retry_after (another worker's lapse within POOL_TTL)
            self._pools.pop((use.name, use.key), None)
            try:
                answer = await self._limiter.rates.call(
                    use.name, use.key, [holder], use.rate.interval_us, use.rate.tolerance_us,
                    "push", int(retry_after * 1_000_000))
            except (RedisUnavailable, ScriptError) as exc:
                self._warn(use, exc)
                continue
            wait = max(wait or 0.0, answer.answers[0][1] / 1_000_000)
        return wait

    async def _refund(self, holder: str, taken: list[RateUse]) -> None:
        for use in taken:
            try:
                await self._call(use, holder, "refund")
            except (RedisUnavailable, ScriptError) as exc:
                self._warn(use, exc)  # the start is spent: the limit errs on the safe side

    def _warn(self, use: RateUse, exc: Exception) -> None:
        if time.monotonic() - self._warned_at > 5:  # a line every 5 s at most
            self._warned_at = time.monotonic()
            self._log.warning("rate limiter unavailable: counted as over the rate",
                              limit=use.label, error=str(exc))

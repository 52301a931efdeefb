"""Renews what every run holds, about every lease/3: the job leases (one
script call per queue) and the limiter slots (one call per limit), all at
once, each call with a deadline well under its lease, so that a silent
limiter or one master failing over cannot delay the renewal of anything
else. What renewal reports lost, or what could not be renewed in time by
our own clock, stops its run through the run table, at its deadline: a
watcher sleeps until the earliest instant a lease or slot could lapse, so
renewal calls that hang delay no stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from ..errors import LeaseQueueError
from ..limiter import Limiter
from ..log import get_log
from ..store.keys import QueueKeys
from ..store.scripts import Scripts
from ..store.specs import LimiterRenewReply, RenewReply
from .runs import Phase, RunRecord, RunTable, SlotHold, StopReason

CHUNK = 500
DEADLINE_SHARE = 0.25  # a renewal call gives up after this share of its lease


@dataclass(frozen=True, slots=True)
class HeartbeaterParams:
    scripts: Scripts
    keys: Callable[[str], QueueKeys]
    table: RunTable
    lease_s: float
    limiter: Limiter
    limiter_lease_s: float | None  # None: the limiter's slots never lapse (in-process)


class Heartbeater:
    def __init__(self, params: HeartbeaterParams) -> None:
        self._p = params
        self._log = get_log("heartbeater")

    @property
    def interval(self) -> float:
        """A third of the shortest lease it keeps alive: the jobs' and the limiter's."""
        lease = self._p.lease_s
        if self._p.limiter_lease_s is not None:
            lease = min(lease, self._p.limiter_lease_s)
        return lease / 3

    async def run(self) -> None:
        """Beat about every interval, and watch the deadlines in between."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.watch)
            next_beat = time.monotonic() + self.interval
            while True:
                await anyio.sleep(max(0.0, next_beat - time.monotonic()))
                next_beat = time.monotonic() + self.interval
                await self.beat()

    async def watch(self) -> None:
        """Stop each run at its own deadline: sleep until the earliest instant
        at which a lease or a slot could lapse (at most an interval, so runs
        claimed meanwhile are seen), then stop what did lapse. A beat whose
        renewals hang (each up to a quarter lease) delays nothing here."""
        while True:
            now = time.monotonic()
            deadline = self._p.table.next_deadline()
            wake = now + self.interval if deadline is None else \
                min(deadline, now + self.interval)
            await anyio.sleep(max(0.0, wake - now))
            self.stop_lapsed()

    async def beat(self) -> None:
        sent_at = time.monotonic()
        table = self._p.table
        async with anyio.create_task_group() as tg:
            # job leases first, then limiter slots; every call on its own
            for queue, runs in table.for_renewal().items():
                for start in range(0, len(runs), CHUNK):
                    tg.start_soon(self._renew_leases, queue, runs[start:start + CHUNK], sent_at)
            for name, holds in table.slots_by_limit().items():
                tg.start_soon(self._renew_slots, name, holds, sent_at)
        self.stop_lapsed()

    def stop_lapsed(self) -> None:
        """Stop (through the run table) what can no longer be confirmed by our clock."""
        for run, reason in self._p.table.lapses(time.monotonic()):
            if not run.running:  # claimed, not started: there is no run to stop
                self._log.warning("lease lapsed before the run started; it will not start",
                                  **run.fields())
                continue
            what = "lease" if reason is StopReason.LEASE_LOST else "limiter slot"
            self._log.warning(f"{what} lapsed: renewals failed for longer than its lease; "
                              "stopping the run", reason=str(reason), **run.fields())

    async def _renew_leases(self, queue: str, runs: list[RunRecord], sent_at: float) -> None:
        answers: list[RenewReply] | None = None
        with anyio.move_on_after(self._p.lease_s * DEADLINE_SHARE):
            try:
                answers = await self._p.scripts.renew(
                    self._p.keys(queue), [(r.job.id, r.job.token) for r in runs],
                    int(self._p.lease_s * 1000))
            except LeaseQueueError as exc:
                self._log.warning("lease renewal failed", queue=queue, error=str(exc))
                return
        if answers is None:
            self._log.warning("lease renewal timed out", queue=queue,
                              deadline_s=self._p.lease_s * DEADLINE_SHARE)
            return
        table = self._p.table
        for run, answer in zip(runs, answers, strict=True):
            if answer is RenewReply.LOST:
                # a run settling or settled since the renewal was sent (acked, or
                # released: a rate wait): its settle reply decides
                if run.phase not in (Phase.SETTLING, Phase.SETTLED, Phase.LOST):
                    self._log.warning("lease lost; stopping the run, its result will be "
                                      "discarded", **run.fields())
                    table.lose(run, StopReason.LEASE_LOST)
                continue
            table.renewed(run, sent_at)
            if answer is RenewReply.CANCEL_REQUESTED and run.stop_reason is None and \
                    run.phase in (Phase.CLAIMED, Phase.STARTED, Phase.ABANDONED):
                self._log.info("cancel requested; stopping the run", **run.fields())
                table.stop(run, StopReason.CANCELED)

    async def _renew_slots(self, name: str, holds: list[tuple[RunRecord, SlotHold]],
                           sent_at: float) -> None:
        lease_s = self._p.limiter_lease_s
        answers: list[LimiterRenewReply] | None = None
        with anyio.move_on_after((lease_s or 30.0) * DEADLINE_SHARE):
            try:
                answers = await self._p.limiter.renew(name, [h.holder for _, h in holds])
            except LeaseQueueError as exc:
                self._log.warning("limiter renewal failed", limit=name, error=str(exc))
                return
        if answers is None:
            self._log.warning("limiter renewal timed out", limit=name)
            return
        table = self._p.table
        for (run, hold), answer in zip(holds, answers, strict=True):
            if answer is LimiterRenewReply.RENEWED:
                table.slot_renewed(hold, sent_at)
            elif run.running and run.stop_reason is None:
                reason = (StopReason.REPLACED if answer is LimiterRenewReply.EVICTED
                          else StopReason.SLOT_LOST)
                self._log.warning("limiter slot lost; stopping the run", limit=name,
                                  reason=str(reason), **run.fields())
                table.stop(run, reason)

"""The scheduler loop: every worker runs one, there is no leader. It reads
the recorded schedules with the server clock, and for a due one takes the
fire with schedule_fire (checked on the server clock, so of N replicas
exactly one gets it), enqueues ``schedule:<name>:<fire ms>`` through the
enqueue dedup, then confirms with schedule_done.

It never decides with the client clock: every instant is the server's, the
local clock only measures how long to sleep."""

from __future__ import annotations

import os
from dataclasses import dataclass

import anyio

from ..log import get_log
from ..schedule_spec import (
    ScheduleRecord,
    decide,
    fire_job_id,
    format_ms,
    jitter_delay,
    parse_record,
)
from ..schedules import Enqueue
from ..store.keys import SchedulesKeys
from ..store.scripts import Scripts
from ..store.specs import ScheduleDoneReply, ScheduleFireReply

MIN_WAIT = 0.01  # seconds: a floor on the loop's sleep, so nothing can spin


@dataclass(frozen=True, slots=True)
class SchedulerParams:
    scripts: Scripts
    keys: SchedulesKeys
    enqueue: Enqueue
    worker_id: str
    # most seconds between two reads of the records (a new, resumed or
    # changed schedule is seen within this); a due fire wakes the loop sooner
    poll: float = 1.0
    # how long a worker that took a fire has to confirm its enqueue before
    # another worker takes the fire over (its job id dedups a double enqueue)
    fire_lease_ms: int = 10_000


class Scheduler:
    def __init__(self, params: SchedulerParams) -> None:
        self.p = params
        self._log = get_log("scheduler", worker_id=params.worker_id)
        # who takes this scheduler's fires (schedule_fire's taker): its worker's
        # id and a nonce of its own, so that a call sent again after a lost
        # reply is recognised as its own, and a second live process with the
        # same worker id (given by hand) never is (at most 200 characters)
        self.taker = f"{params.worker_id[:191]}.{os.urandom(4).hex()}"
        self.fired = 0  # fires this worker took (tests and the shutdown line)
        # the problem last reported per malformed schedule (reported again
        # only when its record changes, not at every look)
        self._reported: dict[str, str] = {}

    async def run(self) -> None:
        while True:
            try:
                wait = await self.tick()
            except Exception as exc:  # Redis down: try again next poll
                self._log.warning("scheduler: cannot read the schedules", error=str(exc))
                wait = self.p.poll
            await anyio.sleep(max(MIN_WAIT, wait))

    async def tick(self) -> float:
        """Fire what is due; returns the seconds until the next look."""
        p = self.p
        now, rows = await p.scripts.schedule_list(p.keys)
        soonest = now + int(p.poll * 1000)
        for row in rows:
            rec = parse_record(*row)
            if rec.problem or rec.spec is None or rec.next_ms is None:
                self._report(rec)
                continue
            self._reported.pop(rec.name, None)
            due = rec.next_ms if not rec.paused else None
            if rec.pending_ms:  # another worker's fire: taken over after its lease
                due = rec.pending_until_ms
            if due is None:
                continue
            if due > now:
                soonest = min(soonest, due)
                continue
            try:
                await self._fire(rec, now)
            except Exception as exc:  # this schedule only: the others keep firing
                self._log.error("schedule fire failed; tried again at the next look",
                                schedule=rec.name, error=str(exc))
            soonest = now  # look again at once: the record moved
        return (soonest - now) / 1000

    async def _fire(self, rec: ScheduleRecord, now: int) -> None:
        p = self.p
        assert rec.spec is not None and rec.next_ms is not None
        spec = rec.spec
        decision = decide(spec, rec.next_ms, now) if rec.next_ms <= now else None
        code, fire_ms, server_now = await p.scripts.schedule_fire(
            p.keys, rec.name, rec.next_ms,
            decision.next_ms if decision else spec.next_after(now),
            decision.fire_ms if decision else 0, p.fire_lease_ms, self.taker)
        if code is ScheduleFireReply.SKIPPED:
            self._log.warning("schedule missed fires (workers down or late): skipped by its "
                              "misfire policy", schedule=rec.name, missed_from_ms=rec.next_ms,
                              now_ms=server_now)
            return
        if code is ScheduleFireReply.MALFORMED:
            self._report(rec)
            return
        if code not in (ScheduleFireReply.FIRED, ScheduleFireReply.RETRY):
            return  # not due, moved or pending elsewhere, paused: nothing to do
        delay = jitter_delay(spec, fire_ms)
        job = await p.enqueue(spec.job, spec.payload, fire_job_id(rec.name, fire_ms), spec.queue,
                              delay)
        done = await p.scripts.schedule_done(p.keys, rec.name, fire_ms)
        self.fired += 1
        self._log.info("schedule fired", schedule=rec.name, job_id=job.id, job=spec.job,
                       queue=spec.queue, fire=format_ms(fire_ms, spec.tz), fire_ms=fire_ms,
                       created=job.created, delay_s=round(delay, 3),
                       catch_up=bool(decision and decision.missed),
                       taken_over=code is ScheduleFireReply.RETRY,
                       confirmed=done is ScheduleDoneReply.DONE)

    def _report(self, rec: ScheduleRecord) -> None:
        problem = rec.problem or f"schedule {rec.name!r}: the record is incomplete"
        key = f"{problem}\n{rec.raw_spec}\n{rec.raw_state}"
        if self._reported.get(rec.name) != key:
            self._reported[rec.name] = key
            self._log.error("schedule record malformed: skipped until it is redeclared or "
                            "fixed; the other schedules keep firing", schedule=rec.name,
                            problem=problem)

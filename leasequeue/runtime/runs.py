"""The run table: one record per run of a job held by this worker, from its
claim until it is settled, and the only code that changes a run's phase.

    claimed ──start──► started ──returned──► finished ──settle──► settling ──► settled
       │                  │  └─past its stop grace──► abandoned ──returned──┘      │
       └──settle (released, skipped, buried before it started)──► settling         │
    any live phase ──lease lost──► lost             settling ──write refused──► lost

Claimer, starter, executor, acker, heartbeater, timeouts and shutdown all
ask this table; an invalid phase change raises InvalidTransition (a bug,
caught by the tests). A run holds two things, its job lease and each limiter
slot it took, and losing either stops it (invariant 10). A record leaves the
table once it is settled or lost *and* its handler has returned: a handler
that outlives its lease or its stop grace keeps counting here (against
``concurrency``, and its slots stay held) until its thread really returns."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio

from ..log import Log, get_log
from ..models import ClaimedJob


class Phase(StrEnum):
    CLAIMED = "claimed"
    STARTED = "started"
    ABANDONED = "abandoned"
    FINISHED = "finished"
    SETTLING = "settling"
    SETTLED = "settled"
    LOST = "lost"


class StopReason(StrEnum):
    """Why a run was asked to stop; the first reason wins."""

    TIMEOUT = "timeout"
    LEASE_LOST = "lease-lost"
    SLOT_LOST = "slot-lost"
    CANCELED = "canceled"
    REPLACED = "replaced"
    SHUTDOWN = "shutdown"


# the phases as module constants, for the hot paths: on Python 3.11 every
# attribute of an Enum class goes through EnumType.__getattr__'s slot
# (about 0.09 us against 0.01 us for a global; a run reads ~30 of them)
CLAIMED, STARTED, ABANDONED, FINISHED = (Phase.CLAIMED, Phase.STARTED, Phase.ABANDONED,
                                         Phase.FINISHED)
SETTLING, SETTLED, LOST = Phase.SETTLING, Phase.SETTLED, Phase.LOST

TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    Phase.CLAIMED: frozenset({Phase.STARTED, Phase.SETTLING, Phase.LOST}),
    Phase.STARTED: frozenset({Phase.FINISHED, Phase.ABANDONED, Phase.LOST}),
    Phase.ABANDONED: frozenset({Phase.FINISHED, Phase.LOST}),
    Phase.FINISHED: frozenset({Phase.SETTLING, Phase.LOST}),
    Phase.SETTLING: frozenset({Phase.SETTLED, Phase.LOST}),
    Phase.SETTLED: frozenset(),
    Phase.LOST: frozenset(),
}
# phases whose job lease this worker still renews
RENEWED = frozenset({Phase.CLAIMED, Phase.STARTED, Phase.ABANDONED, Phase.FINISHED,
                     Phase.SETTLING})


class InvalidTransition(AssertionError):
    """A phase change the run table does not allow: a bug in the runtime."""


@dataclass(eq=False, slots=True)
class SlotHold:
    """One limiter slot a run holds: which limit, as which holder, and when
    the request that last confirmed it was sent (monotonic seconds)."""

    name: str
    holder: str
    lease_s: float
    confirmed_at: float

    @property
    def valid_until(self) -> float:
        return self.confirmed_at + self.lease_s


@dataclass(eq=False, slots=True)
class RunRecord:
    """A run's whole life in this worker. Fields other than the handler's
    own (definition, kwargs, ctx) are written by the RunTable only."""

    job: ClaimedJob
    lease_s: float
    claimed_at: float  # monotonic: when the claim request was sent (or ran: RunTable.claimed)
    phase: Phase = Phase.CLAIMED
    lease_confirmed_at: float = 0.0  # send time of the claim or renew that confirmed it
    stop_reason: StopReason | None = None
    stop_deadline: float = math.inf  # monotonic: when a stopped sync handler is abandoned
    running: bool = False  # the handler is executing
    slots: tuple[SlotHold, ...] = ()  # the limiter slots it holds (a tuple: most hold none)
    scope: anyio.CancelScope | None = None  # an async handler's cancel scope
    thread_scope: anyio.CancelScope | None = None  # lets shutdown leave a thread behind
    is_sync: bool = False
    stop_grace: float = 0.0
    timeout: float | None = None  # seconds, from the job's definition
    timeout_at: float = math.inf  # monotonic
    started_at: float = 0.0
    start_known: bool = False  # Redis knows the run started (claimed started, or marked)
    ctx: Any = None  # the handler's Context, once prepared
    info: Any = None  # the hooks' RunInfo (the executor's), when the App has run hooks
    log: Log | None = None
    # (queue, job id, token): the run table's key, made once
    key: tuple[str, str, int] = ("", "", 0)

    @property
    def attempt(self) -> int:
        """This run's attempt number (a run claimed not started counts on start)."""
        return self.job.attempt if self.job.started else self.job.attempt + 1

    @property
    def lease_valid_until(self) -> float:
        return self.lease_confirmed_at + self.lease_s

    def fields(self) -> dict[str, Any]:
        return {"job_id": self.job.id, "job": self.job.name, "queue": self.job.queue,
                "run": f"{self.job.id}:{self.job.token}", "phase": str(self.phase)}


class RunTable:
    """Every run this worker holds, keyed by (queue, job id, token): a job
    reaped from under this worker and claimed by it again is two runs, and
    the stale one must still be seen (and stopped)."""

    def __init__(self, lease_s: float, worker_id: str = "") -> None:
        self.lease_s = lease_s
        self._runs: dict[tuple[str, str, int], RunRecord] = {}
        self._log = get_log("runs", worker_id=worker_id)

    # -- queries ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(list(self._runs.values()))

    def get(self, job: ClaimedJob) -> RunRecord | None:
        return self._runs.get((job.queue, job.id, job.token))

    def for_renewal(self) -> dict[str, list[RunRecord]]:
        """Runs whose job lease this worker keeps renewing, by physical queue."""
        grouped: dict[str, list[RunRecord]] = {}
        for run in self._runs.values():
            if run.phase in RENEWED:
                grouped.setdefault(run.job.queue, []).append(run)
        return grouped

    def slots_by_limit(self) -> dict[str, list[tuple[RunRecord, SlotHold]]]:
        grouped: dict[str, list[tuple[RunRecord, SlotHold]]] = {}
        for run in self._runs.values():
            for hold in run.slots:
                grouped.setdefault(hold.name, []).append((run, hold))
        return grouped

    def running(self) -> list[RunRecord]:
        """Runs whose handler is executing (started, abandoned, or lost but not returned)."""
        return [r for r in self._runs.values() if r.running]

    @property
    def abandoned(self) -> int:
        """Handlers past their stop grace that have not returned."""
        return sum(1 for r in self._runs.values()
                   if r.running and r.phase in (ABANDONED, LOST)
                   and r.stop_deadline <= time.monotonic())

    # -- phase changes -----------------------------------------------------------

    def _move(self, run: RunRecord, to: Phase) -> None:
        if to not in TRANSITIONS[run.phase]:
            raise InvalidTransition(f"run {run.job.id}:{run.job.token}: {run.phase} -> {to}")
        run.phase = to

    def claimed(self, jobs: Iterable[ClaimedJob], sent_at: float,
                received_at: float | None = None) -> list[RunRecord]:
        """Records for the jobs a claim sent at ``sent_at`` leased (their lease
        confirmed then, a safe underestimate). ``received_at``: when the claim
        ran, at the latest, if long after the send (the claim behind an idle
        wait): the run counts as claimed from then (its wait, its confirm)."""
        runs = []
        claimed_at = sent_at if received_at is None else received_at
        for job in jobs:
            key = (job.queue, job.id, job.token)
            run = RunRecord(job, self.lease_s, claimed_at, lease_confirmed_at=sent_at,
                            start_known=job.started, key=key)
            self._runs[key] = run
            runs.append(run)
        return runs

    def start(self, run: RunRecord, min_share: float) -> bool:
        """claimed -> started, unless the run must not start: a stop was asked
        (cancel, lease lost, shutdown) or its lease, or one of its slots, may
        not stay valid for ``min_share`` of its length (the process stalled or
        renewals failed: starting now could overlap another holder)."""
        if run.phase is not CLAIMED or run.stop_reason is not None:
            return False
        now = time.monotonic()
        if run.lease_confirmed_at + run.lease_s - now < min_share * run.lease_s:
            return False
        if run.slots and any(h.valid_until - now < min_share * h.lease_s for h in run.slots):
            return False
        run.phase = STARTED  # claimed -> started: checked above
        run.running = True
        run.started_at = now
        return True

    @staticmethod
    def start_confirmed(run: RunRecord) -> None:
        """Redis knows the run started (its attempt is counted there)."""
        run.start_known = True

    def returned(self, run: RunRecord) -> None:
        """The handler returned (or was left behind at shutdown)."""
        run.running = False
        phase = run.phase
        if phase is STARTED or phase is ABANDONED:
            run.phase = FINISHED  # both may finish
        elif phase is SETTLED or phase is LOST:
            self._runs.pop(run.key, None)

    def abandon(self, run: RunRecord) -> None:
        """A sync handler is past its stop grace and has not returned."""
        if run.phase is STARTED:
            self._move(run, ABANDONED)

    def settling(self, run: RunRecord) -> bool:
        """claimed/finished -> settling; False when the run was lost meanwhile
        (nothing may be written for it then)."""
        phase = run.phase
        if phase is LOST:
            return False
        if phase is not FINISHED:  # the common case, valid: no table lookup
            self._move(run, SETTLING)
        else:
            run.phase = SETTLING
        return True

    def settled(self, run: RunRecord, accepted: bool) -> None:
        """The settling write landed: accepted, or refused by fencing (lost)."""
        if run.phase is SETTLING:  # settling may end either way
            run.phase = SETTLED if accepted else LOST
            if not run.running:
                self._runs.pop(run.key, None)
        else:
            self._forget_if_done(run)

    def lose(self, run: RunRecord, reason: StopReason = StopReason.LEASE_LOST) -> None:
        """The job lease is gone (renew said so, or it lapsed by our clock, or
        Redis refused the start): no more renewals or writes; a running
        handler is stopped."""
        if run.phase in (LOST, SETTLED):
            return
        self._move(run, LOST)
        self.stop(run, reason)  # a running handler stops; one not started never starts
        self._forget_if_done(run)

    def _forget_if_done(self, run: RunRecord) -> None:
        if run.phase in (SETTLED, LOST) and not run.running:
            self._runs.pop(run.key, None)

    # -- stopping ------------------------------------------------------------------

    def stop(self, run: RunRecord, reason: StopReason) -> None:
        """Ask a run to stop: an async handler is cancelled now; a sync handler
        (a thread, which cannot be interrupted) sees ctx.is_stopping() and is
        abandoned after its stop grace. A run not started yet never starts."""
        if run.stop_reason is None:
            run.stop_reason = reason
        if run.scope is not None:
            run.scope.cancel()
        if run.is_sync and run.running:
            run.stop_deadline = min(run.stop_deadline, time.monotonic() + run.stop_grace)

    # -- renewals --------------------------------------------------------------------

    def renewed(self, run: RunRecord, sent_at: float) -> None:
        run.lease_confirmed_at = max(run.lease_confirmed_at, sent_at)

    @staticmethod
    def slot_renewed(hold: SlotHold, sent_at: float) -> None:
        hold.confirmed_at = max(hold.confirmed_at, sent_at)

    def next_deadline(self) -> float | None:
        """The earliest instant (monotonic) at which `lapses` would stop a run
        if nothing is renewed before it; None when nothing can lapse."""
        earliest: float | None = None
        for run in self._runs.values():
            if run.phase in (CLAIMED, STARTED, ABANDONED, FINISHED):
                if earliest is None or run.lease_valid_until < earliest:
                    earliest = run.lease_valid_until
            if run.running and run.stop_reason is None:
                for hold in run.slots:
                    if earliest is None or hold.valid_until < earliest:
                        earliest = hold.valid_until
        return earliest

    def lapses(self, now: float) -> list[tuple[RunRecord, StopReason]]:
        """Stop what can no longer be trusted by our own (monotonic) clock:
        runs whose job lease must have run out (renewals failed for longer
        than the lease) are lost; running runs whose limiter slot must have
        run out are stopped (the slot may be someone else's by now)."""
        stopped: list[tuple[RunRecord, StopReason]] = []
        for run in list(self._runs.values()):
            if run.phase in (CLAIMED, STARTED, ABANDONED, FINISHED):
                if run.lease_valid_until <= now:
                    self.lose(run, StopReason.LEASE_LOST)
                    stopped.append((run, StopReason.LEASE_LOST))
                    continue
            if run.running and run.stop_reason is None and any(
                    h.valid_until <= now for h in run.slots):
                self.stop(run, StopReason.SLOT_LOST)
                stopped.append((run, StopReason.SLOT_LOST))
        return stopped

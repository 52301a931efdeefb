"""Plain data the public API returns: job records, enqueue results, queue stats.

No Redis access and no decoding of script replies here (that is scripts.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from .store.specs import FailReply


class JobState(StrEnum):
    """The state of a job: queued, scheduled or leased while it lives;
    succeeded, skipped, canceled or dead once it has ended."""

    QUEUED = "queued"
    SCHEDULED = "scheduled"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    CANCELED = "canceled"
    DEAD = "dead"

    @property
    def terminal(self) -> bool:
        """Whether the job has ended (succeeded, skipped, canceled, dead)."""
        return self in (JobState.SUCCEEDED, JobState.SKIPPED, JobState.CANCELED, JobState.DEAD)


class EnqueuedJob(NamedTuple):
    """What enqueue answers: the id, and whether this call created the job.
    Immutable, as a frozen dataclass would be, but a tuple: one is made per
    enqueued job, and a frozen dataclass's __init__ (object.__setattr__ per
    field) made the answers of a bulk enqueue 3.98 us a job against 2.45
    (benchmarks/bulk_stages.py, results/bulk_stages.txt)."""

    id: str
    queue: str
    name: str
    created: bool
    state: str


class NewJob(NamedTuple):
    """One job ready for the enqueue script (payload already encoded);
    internal, built by Producer.prepare and never changed after. A tuple, as
    EnqueuedJob: immutable, and built by tuple.__new__ for what a plain
    slots dataclass costs (0.13-0.23 us against 0.16-0.27 in three rounds of
    benchmarks/prepare_cost.py, 2026-12-03)."""

    id: str
    name: str
    payload: bytes  # the msgpack envelope (ids and kwargs)
    delay_ms: int
    priority: int
    max_attempts: int
    max_infra: int
    # the rate key a claim may park it by ("" = none; see lua/claim.lua)
    grp: str = ""


@dataclass(slots=True)
class ClaimedJob:
    """Everything a worker needs to run one leased job."""

    id: str
    queue: str
    token: int
    attempt: int
    name: str
    payload: bytes  # the msgpack envelope; decoded by the executor
    max_attempts: int  # 0 = unset: the job's definition decides
    max_infra: int  # 0 = unset: the job's definition decides
    work_failures: int
    infra_failures: int
    enqueued_ms: int
    started: bool = False  # the run's attempt is counted (claim start_now, or start)
    claimed_ms: int = 0  # server clock of the claim (wait-time metrics)


@dataclass(frozen=True, slots=True)
class ClaimBatch:
    now_ms: int
    next_due_in_ms: int  # -1: nothing scheduled
    jobs: list[ClaimedJob]


@dataclass(frozen=True, slots=True)
class FailOutcome:
    code: FailReply
    state: str
    attempt: int
    work_failures: int
    infra_failures: int


@dataclass(frozen=True, slots=True)
class ReapOutcome:
    requeued: int
    dead: int
    canceled: int
    stale: int
    unstarted: int = 0  # of the requeued and dead: leases that expired never started


@dataclass(frozen=True, slots=True)
class ErrorEntry:
    """One entry of a job's error history."""

    attempt: int  # the attempt it happened on (0: unknown, an entry of old data)
    kind: str  # work | infra | dead | lease-expired | note ('' : old data)
    at_ms: int  # server clock (0: unknown)
    text: str


@dataclass(frozen=True, slots=True)
class RunLog:
    """What ``ctx.log`` wrote during one run, as kept with the job."""

    attempt: int  # the attempt of the run
    outcome: str  # succeeded | skipped | canceled | work | infra | dead
    at_ms: int  # server clock, when the run was settled
    lines: list[str]


@dataclass(frozen=True, slots=True)
class Progress:
    """A run's last reported progress (``ctx.progress``)."""

    fraction: float  # 0..1
    note: str
    at_ms: int  # when it was written (server clock)


@dataclass(slots=True)
class JobRecord:
    """A job as get_job reads it: state, counters, instants (ms, server clock)."""

    id: str
    queue: str
    name: str
    state: str
    attempt: int
    token: int
    work_failures: int
    infra_failures: int
    max_attempts: int | None  # None: unset when enqueued, the job's definition decides
    max_infra_attempts: int | None
    priority: int
    correlation_id: str
    request_id: str
    enqueued_ms: int | None
    ready_ms: int | None
    due_ms: int | None
    claimed_ms: int | None
    finished_ms: int | None
    lease_expires_ms: int | None
    worker: str | None
    cancel_requested: bool
    reason: str | None
    error: str | None  # the text of the newest entry of `errors`
    payload: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    errors: list[ErrorEntry] = field(default_factory=list)  # oldest first, the last 5
    logs: list[RunLog] = field(default_factory=list)  # oldest first, the last 3 runs kept
    rerun_of: str | None = None  # the job this one re-runs (App.rerun)
    progress: Progress | None = None  # the last ctx.progress written
    checkpoints: dict[str, Any] = field(default_factory=dict)  # ctx.checkpoint name -> value
    saga: dict[str, Any] | None = None  # the saga record (status, steps, failed step)


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue's depth and counters as App.stats reads them: jobs ready,
    scheduled, leased, dead and retained (finished, within retention), the age
    of the oldest ready job and when the next scheduled one is due (ms, None:
    none), the counters (enqueued, succeeded, retried, dead, ...) and whether
    it is paused. ``now_ms`` is the server clock when it was read."""

    queue: str
    now_ms: int
    ready: int
    scheduled: int
    leased: int
    dead: int
    retained: int
    oldest_ready_age_ms: int | None
    next_due_in_ms: int | None
    counters: dict[str, int]
    paused: bool = False

    @property
    def empty(self) -> bool:
        """Nothing in any set, no counter, not paused: Redis holds nothing
        for the queue (or never did)."""
        return not (self.ready or self.scheduled or self.leased or self.dead or self.retained
                    or self.counters or self.paused)

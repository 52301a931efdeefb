"""Every script's contract (KEYS, ARGV, the repeated per-item group) and the
named codes its reply uses. The contract test checks both against the
headers and bodies of the .lua files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any, TypeVar, cast


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """A script's contract; tests check it against the header of the .lua file."""

    name: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    per_item: tuple[str, ...] = ()  # the repeated ARGV group after `argv`, if any
    # when set, the groups come in runs: this head (its first value the
    # run's count of groups), then that many per_item groups (enqueue.lua)
    run_head: tuple[str, ...] = ()
    # keys built per worker (QueueKeys methods taking the worker id), last in KEYS
    worker_keys: tuple[str, ...] = ()


SPECS: dict[str, ScriptSpec] = {
    s.name: s
    for s in (
        ScriptSpec(
            "enqueue",
            ("jobs", "payloads", "ready", "scheduled", "stats", "wake", "events", "line"),
            ("events_maxlen", "audit_all", "wake_cap"),
            ("id", "payload"),
            run_head=("count", "name", "delay_ms", "priority", "max_attempts", "max_infra",
                      "grp", "payload"),
        ),
        ScriptSpec("enqueue_one", ("jobs", "stats", "line", "wake"),
                   ("wake_cap", "name", "max_attempts", "max_infra", "grp", "payload", "id")),
        ScriptSpec(
            "claim",
            ("ready", "scheduled", "leases", "jobs", "payloads", "dead", "deadletters",
             "stats", "events", "token", "paused", "parked", "line", "claim"),
            ("count", "lease_ms", "worker_id", "promote_batch", "events_maxlen", "audit_all",
             "letters_maxlen", "start_now", "claim_id"),
            worker_keys=("claim",),
        ),
        ScriptSpec(
            "claim_line",
            ("ready", "scheduled", "leases", "jobs", "payloads", "stats", "token", "paused",
             "line", "claim"),
            ("count", "lease_ms", "worker_id", "start_now", "claim_id"),
            worker_keys=("claim",),
        ),
        ScriptSpec("start", ("leases", "jobs"), (), ("id", "token")),
        ScriptSpec("renew", ("leases", "jobs", "events", "payloads"), ("lease_ms", "events_maxlen"),
                   ("id", "token")),
        ScriptSpec(
            "ack",
            ("leases", "jobs", "payloads", "errors", "results", "done", "stats", "events",
             "logs", "waiting", "runstate"),
            ("events_maxlen", "audit_all", "outcome", "retention_ms", "expire_batch"),
            ("id", "token", "result", "note", "logs"),
        ),
        ScriptSpec(
            "fail",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "dead", "deadletters", "stats", "wake", "events", "logs", "waiting", "runstate",
             "line"),
            ("id", "token", "kind", "reason", "error", "delay_ms", "events_maxlen",
             "letters_maxlen", "retention_ms", "max_attempts", "max_infra", "dead_max",
             "dead_retention_ms", "logs"),
        ),
        ScriptSpec(
            "release",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "stats", "wake", "events", "logs", "waiting", "runstate", "woken", "parked"),
            ("delay_ms", "retention_ms", "events_maxlen", "why", "unpark", "park_grp",
             "park_in_us", "interval_us"),
            ("id", "token"),
        ),
        ScriptSpec("wake", ("jobs", "ready", "scheduled", "stats", "wake", "woken", "events",
                            "payloads", "line"),
                   ("events_maxlen", "wake_cap"), ("id", "token")),
        ScriptSpec(
            "reap",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "dead", "deadletters", "stats", "wake", "events", "logs", "waiting", "runstate"),
            ("batch", "backoff_base_ms", "backoff_cap_ms", "retention_ms", "events_maxlen",
             "letters_maxlen", "dead_max", "dead_retention_ms", "default_max_attempts",
             "default_max_infra"),
            ("name", "max_attempts", "max_infra"),
        ),
        ScriptSpec("expire", ("done", "jobs", "payloads", "errors", "results", "logs",
                              "runstate"),
                   ("batch",)),
        ScriptSpec(
            "cancel",
            ("jobs", "payloads", "errors", "results", "ready", "scheduled", "done", "stats",
             "events", "leases", "logs", "waiting", "runstate"),
            ("id", "retention_ms", "events_maxlen", "token"),
        ),
        ScriptSpec(
            "replay",
            ("jobs", "errors", "ready", "dead", "stats", "wake", "events", "payloads", "line"),
            ("events_maxlen",),
            ("id",),
        ),
        ScriptSpec("purge", ("dead", "jobs", "payloads", "errors", "results", "stats", "logs",
                             "runstate"),
                   ("batch",)),
        ScriptSpec("limiter_acquire", ("limit", "evicted", "waiters"),
                   ("holder", "limit", "lease_ms", "mode", "waiter", "waiter_ms",
                    "waiters_cap")),
        ScriptSpec("limiter_renew", ("limit", "evicted"), ("lease_ms",), ("holder",)),
        ScriptSpec("limiter_release", ("limit", "evicted", "waiters"), (), ("holder",)),
        ScriptSpec("rate", ("state", "reserved"),
                   ("interval_us", "tolerance_us", "mode", "push_us", "stale_us", "ahead"),
                   ("holder",)),
        ScriptSpec(
            "stats",
            ("ready", "scheduled", "leases", "dead", "done", "jobs", "stats", "paused",
             "line"),
            ("max_classes",),
        ),
        ScriptSpec("queue_config", ("config",), ("shards", "expected")),
        ScriptSpec("watch", ("jobs", "waiting"), ("id", "ttl_ms")),
        ScriptSpec("schedule_upsert", ("specs", "state"), ("name", "spec", "next_ms", "paused")),
        ScriptSpec("schedule_list", ("specs", "state"), ("max_schedules",)),
        ScriptSpec("schedule_fire", ("state",),
                   ("name", "expected_ms", "next_ms", "fire_ms", "lease_ms", "taker")),
        ScriptSpec("schedule_done", ("state",), ("name", "fire_ms")),
        ScriptSpec("schedule_pause", ("state",), ("name", "paused", "next_ms")),
        ScriptSpec("schedule_trigger", ("specs",), ("name",)),
        ScriptSpec("runstate", ("jobs", "runstate", "events"),
                   ("id", "token", "kind", "value", "max_bytes", "events_maxlen", "detail")),
        # circuit breakers (leasequeue/breaker.py)
        ScriptSpec("breaker_check", ("state", "index", "events"),
                   ("name", "holder", "probe_lease_ms", "cooldown_ms", "events_maxlen")),
        ScriptSpec("breaker_record", ("state", "failures", "index", "events"),
                   ("name", "holder", "outcome", "failures", "window_ms", "cooldown_ms",
                    "max_cooldown_ms", "events_maxlen")),
        ScriptSpec("breaker_force", ("state", "failures", "index", "events"),
                   ("name", "mode", "cooldown_ms", "who", "events_maxlen")),
        ScriptSpec("breaker_state", ("state", "failures"), ("window_ms",)),
        # the resource ledger (leasequeue/resources.py)
        ScriptSpec("resource_open", ("entry", "expiry", "worker"),
                   ("member", "kind", "key", "queue", "job", "token", "worker_id", "life",
                    "ttl_ms")),
        ScriptSpec("resource_claim", ("entry",), ("queue", "job", "token", "closer", "lease_ms")),
        ScriptSpec("resource_clear", ("entry", "expiry", "worker"),
                   ("member", "queue", "job", "token")),
    )
}


# -- the named codes of each script's reply (the CODE_<NAME> locals of the .lua) --

class EnqueueReply(IntEnum):
    EXISTED = 0
    CREATED = 1


class EnqueueOneReply(IntEnum):
    """enqueue_one.lua's one code; a job it created is answered 'queued'."""

    EXISTED = 0


class ClaimLineReply(IntEnum):
    """claim_line.lua's one code; a claim it took is answered as claim.lua's."""

    GENERAL = 0  # claim.lua must take this claim (nothing was written)


class StartReply(IntEnum):
    LOST = 0
    STARTED = 1
    CANCEL_REQUESTED = 2


class RenewReply(IntEnum):
    LOST = 0
    RENEWED = 1
    CANCEL_REQUESTED = 2


class AckReply(IntEnum):
    REFUSED = 0
    FINISHED = 1


class FailReply(IntEnum):
    REFUSED = 0
    RETRY = 1
    DEAD = 2
    CANCELED = 3


class ReleaseReply(IntEnum):
    REFUSED = 0
    RELEASED = 1
    CANCELED = 2


class WakeReply(IntEnum):
    IGNORED = 0
    WOKEN = 1
    MARKED = 2


class ReplayReply(IntEnum):
    MALFORMED = -1
    NOT_DEAD = 0
    REPLAYED = 1


class CancelStatus(StrEnum):
    CANCELED = "canceled"
    CANCEL_REQUESTED = "cancel-requested"
    FINAL = "final"
    STALE = "stale"
    MISSING = "missing"
    MALFORMED = "malformed"


class LimiterAcquireReply(IntEnum):
    NO_SLOT = 0
    TAKEN = 1
    EVICTED = 2
    WAITING = 3  # refused, and registered as a waiter of the limit


class LimiterRenewReply(IntEnum):
    LOST = 0
    RENEWED = 1
    EVICTED = 2


class RateReply(IntEnum):
    DENIED = 0
    TAKEN = 1
    WAIT = 2
    REFUNDED = 3
    STATE = 4


class ScheduleUpsertReply(IntEnum):
    UNCHANGED = 0
    CREATED = 1
    UPDATED = 2


class ScheduleFireReply(IntEnum):
    MALFORMED = -1
    MISSING = 0
    FIRED = 1
    SKIPPED = 2
    RETRY = 3
    NOT_DUE = 4
    MOVED = 5
    PAUSED = 6
    BUSY = 7
    STALE = 8


class ScheduleDoneReply(IntEnum):
    MALFORMED = -1
    MISSING = 0
    DONE = 1
    NOT_PENDING = 2


class SchedulePauseReply(IntEnum):
    MALFORMED = -1
    MISSING = 0
    CHANGED = 1
    UNCHANGED = 2


class ScheduleTriggerReply(IntEnum):
    MISSING = 0
    TRIGGERED = 1


class RunStateReply(IntEnum):
    LOST = 0
    SAVED = 1
    TOO_LARGE = 2


class BreakerCheckReply(IntEnum):
    CLOSED = 0
    PROBE = 1
    OPEN = 2


class BreakerRecordReply(IntEnum):
    NOTED = 0
    OPENED = 1
    REOPENED = 2
    CLOSED = 3


class BreakerForceReply(IntEnum):
    UNCHANGED = 0
    CHANGED = 1


class ResourceOpenReply(IntEnum):
    OPENED = 1
    HELD = 2
    CLOSING = 3


class ResourceClaimReply(IntEnum):
    GONE = 0
    CLAIMED = 1
    BUSY = 2


class ResourceClearReply(IntEnum):
    GONE = 0
    CLEARED = 1


# script name -> the enum of the codes its reply uses (scripts that return
# counts or data only have none)
REPLY_CODES: dict[str, type[IntEnum] | type[StrEnum]] = {
    "enqueue": EnqueueReply,
    "enqueue_one": EnqueueOneReply,
    "claim_line": ClaimLineReply,
    "start": StartReply,
    "renew": RenewReply,
    "ack": AckReply,
    "fail": FailReply,
    "release": ReleaseReply,
    "wake": WakeReply,
    "replay": ReplayReply,
    "cancel": CancelStatus,
    "limiter_acquire": LimiterAcquireReply,
    "limiter_renew": LimiterRenewReply,
    "rate": RateReply,
    "schedule_upsert": ScheduleUpsertReply,
    "schedule_fire": ScheduleFireReply,
    "schedule_done": ScheduleDoneReply,
    "schedule_pause": SchedulePauseReply,
    "schedule_trigger": ScheduleTriggerReply,
    "runstate": RunStateReply,
    "breaker_check": BreakerCheckReply,
    "breaker_record": BreakerRecordReply,
    "breaker_force": BreakerForceReply,
    "resource_open": ResourceOpenReply,
    "resource_claim": ResourceClaimReply,
    "resource_clear": ResourceClearReply,
}


R = TypeVar("R", bound=IntEnum)


def replies(kind: type[R], values: Sequence[Any]) -> list[R]:
    """One reply code per item, by a dict lookup (calling the enum costs about
    a microsecond an item on the hot path); an unknown code raises ValueError
    naming it, as ``kind(code)`` does."""
    members = kind._value2member_map_
    try:
        return [cast(R, members[value]) for value in values]
    except (KeyError, TypeError):  # an unknown or unhashable code: say which
        return [kind(int(value)) for value in values]

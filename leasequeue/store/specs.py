"""Every script's contract (KEYS, ARGV, the repeated per-item group) and the
named codes its reply uses. The contract test checks both against the
headers and bodies of the .lua files."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScriptSpec:
    """A script's contract; tests check it against the header of the .lua file."""

    name: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    per_item: tuple[str, ...] = ()  # the repeated ARGV group after `argv`, if any


SPECS: dict[str, ScriptSpec] = {
    s.name: s
    for s in (
        ScriptSpec(
            "enqueue",
            ("jobs", "payloads", "ready", "scheduled", "stats", "wake", "events"),
            ("events_maxlen", "audit_all", "wake_cap"),
            ("id", "name", "payload", "delay_ms", "priority", "max_attempts", "max_infra"),
        ),
        ScriptSpec(
            "claim",
            ("ready", "scheduled", "leases", "jobs", "payloads", "dead", "deadletters",
             "stats", "events"),
            ("count", "lease_ms", "worker_id", "promote_batch", "events_maxlen", "audit_all",
             "letters_maxlen"),
        ),
        ScriptSpec("renew", ("leases", "jobs", "events"), ("lease_ms", "events_maxlen"),
                   ("id", "token")),
        ScriptSpec(
            "ack",
            ("leases", "jobs", "payloads", "errors", "results", "done", "stats", "events"),
            ("events_maxlen", "audit_all", "outcome", "retention_ms"),
            ("id", "token", "result"),
        ),
        ScriptSpec(
            "fail",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "dead", "deadletters", "stats", "wake", "events"),
            ("id", "token", "kind", "reason", "error", "delay_ms", "events_maxlen",
             "letters_maxlen", "retention_ms"),
        ),
        ScriptSpec(
            "release",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "stats", "wake", "events"),
            ("delay_ms", "retention_ms", "events_maxlen", "why"),
            ("id", "token"),
        ),
        ScriptSpec(
            "reap",
            ("leases", "jobs", "payloads", "errors", "results", "ready", "scheduled", "done",
             "dead", "deadletters", "stats", "wake", "events"),
            ("batch", "backoff_base_ms", "backoff_cap_ms", "retention_ms", "events_maxlen",
             "letters_maxlen"),
        ),
        ScriptSpec("expire", ("done", "jobs", "payloads", "errors", "results"), ("batch",)),
        ScriptSpec(
            "cancel",
            ("jobs", "payloads", "errors", "results", "ready", "scheduled", "done", "stats",
             "events"),
            ("id", "retention_ms", "events_maxlen", "token"),
        ),
        ScriptSpec(
            "replay",
            ("jobs", "errors", "ready", "dead", "stats", "wake", "events"),
            ("events_maxlen",),
            ("id",),
        ),
        ScriptSpec("purge", ("dead", "jobs", "payloads", "errors", "results", "stats"),
                   ("batch",)),
        ScriptSpec("limiter_acquire", ("limit",), ("holder", "limit", "lease_ms", "mode")),
        ScriptSpec("limiter_renew", ("limit",), ("lease_ms",), ("holder",)),
        ScriptSpec("limiter_release", ("limit",), (), ("holder",)),
        ScriptSpec(
            "stats",
            ("ready", "scheduled", "leases", "dead", "done", "jobs", "stats"),
            ("max_classes",),
        ),
        ScriptSpec("queue_config", ("config",), ("shards", "expected")),
    )
}



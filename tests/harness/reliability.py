"""Shared pieces of the reliability suite (tests/test_reliability_*.py): read
what worker processes recorded, read job records and counters with a plain
sync client, enqueue from the test thread, count log lines."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import redis as redis_sync

from leasequeue import App, JobRequest
from leasequeue.store.keys import queue_keys
from leasequeue.store.loader import script_source
from leasequeue.store.record import parse_record
from leasequeue.store.specs import SPECS

RELIABILITY_APP = "tests.harness.apps.reliability_app:app"
Q = "default"


@dataclass(frozen=True, slots=True)
class Execution:
    kind: str  # start | end
    job: str
    token: int
    worker: str
    client_ms: int  # the worker's own wall clock (skewed in the clock test)


def executions(r: redis_sync.Redis, prefix: str) -> list[Execution]:
    """Every execution recorded by tests/harness/apps/reliability_app.py, in order."""
    out = []
    rows: Any = r.lrange(f"{prefix}:test:executions", 0, -1)
    for raw in rows:
        kind, job, token, worker, client_ms = raw.decode().split()
        out.append(Execution(kind, job, int(token), worker, int(client_ms)))
    return out


def starts_by_job(rows: Sequence[Execution]) -> dict[str, list[Execution]]:
    grouped: dict[str, list[Execution]] = defaultdict(list)
    for row in rows:
        if row.kind == "start":
            grouped[row.job].append(row)
    return grouped


def records(r: redis_sync.Redis, prefix: str, queue: str = Q) -> dict[str, dict[str, Any]]:
    """Every job record of a queue, parsed (see RECORD_FIELDS in leasequeue/scripts.py)."""
    raw: Any = r.hgetall(queue_keys(prefix, queue).jobs)
    return {k.decode(): parse_record(v) for k, v in raw.items()}


def counters(r: redis_sync.Redis, prefix: str, queue: str = Q) -> dict[str, int]:
    raw: Any = r.hgetall(queue_keys(prefix, queue).stats)
    return {k.decode(): int(v) for k, v in raw.items()}


def set_sizes(r: redis_sync.Redis, prefix: str, queue: str = Q) -> dict[str, int]:
    qk = queue_keys(prefix, queue)
    return {name: int(r.zcard(getattr(qk, name)))
            for name in ("ready", "scheduled", "leases", "dead", "done")}


def succeeded_events(r: redis_sync.Redis, prefix: str, queue: str = Q) -> dict[str, int]:
    """Accepted completions per job, from the audit trail (workers with LQ_AUDIT=1)."""
    seen: dict[str, int] = defaultdict(int)
    entries: Any = r.xrange(queue_keys(prefix, queue).events)
    for _id, fields in entries:
        if fields[b"event"] == b"succeeded":
            seen[fields[b"job"].decode()] += 1
    return dict(seen)


def enqueue(url: str, prefix: str, requests: Sequence[JobRequest]) -> None:
    """Enqueue from sync test code with a producer-only App."""

    async def go() -> None:
        async with App(url, prefix=prefix) as app:
            await app.enqueue_many(requests)

    anyio.run(go)


def log_lines(path: Path, msg_prefix: str) -> list[dict[str, Any]]:
    """The JSON log lines of a worker log whose message starts with msg_prefix."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and str(entry.get("msg", "")).startswith(msg_prefix):
            found.append(entry)
    return found


def script_names_by_sha() -> dict[str, str]:
    """SHA1 of each loaded script -> its name (to read SLOWLOG entries)."""
    import hashlib

    return {hashlib.sha1(script_source(name, shebang).encode()).hexdigest(): name
            for name in SPECS for shebang in (False, True)}

"""Reads the audit trail: the capped `{P:Q}:events` stream the scripts append
to (emit in lua/_lib.lua), filtered by job id or correlation id.

Each entry says what happened to which job, why (`detail`), who did it
(`by`: worker:<id>, reaper, producer, schedule:<name>, operator:<command>)
and the job's correlation id. There is no index: a read walks the stream
from its newest entry in pages, so it costs O(stream length) at most — the
stream is capped (StoreSettings.events_maxlen, 10,000 by default)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from .store.keys import QueueKeys
from .store.record import text
from .store.shards import logical
from .store.translate import redis_errors

PAGE = 1000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One entry of the audit trail."""

    at_ms: int  # server clock, from the stream entry id
    queue: str
    job_id: str
    event: str  # enqueued, claimed, succeeded, retried, dead, reaped, released, canceled, ...
    detail: str  # why: the dead reason, the failure kind, the release reason, ...
    by: str  # worker:<id>, reaper, producer, schedule:<name>, operator:<command>
    correlation_id: str
    entry: str  # the stream entry id


async def read_audit(redis: Redis, url: str, keys: Sequence[QueueKeys], *,
                     job_id: str | None, correlation_id: str | None,
                     count: int) -> list[AuditEntry]:
    """The newest ``count`` entries (oldest first) of these queues' streams
    about ``job_id`` or with ``correlation_id``."""
    found: list[AuditEntry] = []
    for qk in keys:
        found += await _read_one(redis, url, qk, job_id, correlation_id, count)
    found.sort(key=lambda e: tuple(int(x) for x in e.entry.split("-")))
    return found[-count:]


async def _read_one(redis: Redis, url: str, qk: QueueKeys, job_id: str | None,
                    correlation_id: str | None, count: int) -> list[AuditEntry]:
    out: list[AuditEntry] = []
    top = "+"
    while len(out) < count:
        with redis_errors(url, "audit"):
            page: Any = await redis.xrevrange(qk.events, max=top, count=PAGE)
        for entry_id, fields in page:
            f = {text(k): text(v) for k, v in fields.items()}
            if (job_id is not None and f.get("job") != job_id) or (
                    correlation_id is not None and f.get("corr") != correlation_id):
                continue
            eid = text(entry_id)
            out.append(AuditEntry(int(eid.split("-")[0]), logical(qk.queue), f.get("job", ""),
                                  f.get("event", ""), f.get("detail", ""), f.get("by", ""),
                                  f.get("corr", ""), eid))
            if len(out) >= count:
                break
        if len(page) < PAGE:
            break
        top = "(" + text(page[-1][0])
    return out

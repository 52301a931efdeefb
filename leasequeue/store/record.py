"""The job record as Redis stores it ('|'-joined plain values, see
lua/_lib.lua) and its decoding into a JobRecord. No Redis access."""

from __future__ import annotations

from typing import Any

from .. import codec
from ..errors import MalformedJob
from ..models import JobRecord


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


RECORD_FIELDS = (
    "state", "token", "attempt", "work_fail", "infra_fail", "max_attempts", "max_infra",
    "cancel", "prio", "seq", "enq_ms", "ready_ms", "due_ms", "claim_ms", "end_ms", "name",
    "worker", "reason",
)
_NUMERIC = frozenset(RECORD_FIELDS[1:15])


def parse_record(raw: bytes) -> dict[str, Any]:
    """The '|'-joined job record (see lua/_lib.lua) as a dict; ValueError if malformed."""
    parts = raw.decode().split("|")
    if len(parts) != len(RECORD_FIELDS) + 1 or parts[0] != "1":
        raise ValueError("not a version-1 record")
    return {name: int(value) if name in _NUMERIC else value
            for name, value in zip(RECORD_FIELDS, parts[1:], strict=True)}


def decode_record(job_id: str, queue: str, raw: bytes | None, lease_score: float | None,
                  envelope: bytes | None, error: bytes | None) -> JobRecord | None:
    """Decode a job from its record, payload envelope and last error; raise
    MalformedJob when the record or the envelope cannot be decoded."""
    if raw is None:
        return None
    try:
        m = parse_record(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJob(f"job {job_id} in queue {queue}: record is malformed ({exc})") from exc
    env = codec.decode_envelope(envelope or b"", job_id)

    def instant(name: str) -> int | None:
        return m[name] or None

    return JobRecord(
        id=job_id, queue=queue, name=m["name"], state=m["state"], attempt=m["attempt"],
        token=m["token"], work_failures=m["work_fail"], infra_failures=m["infra_fail"],
        max_attempts=m["max_attempts"], max_infra_attempts=m["max_infra"], priority=m["prio"],
        correlation_id=env.correlation_id, request_id=env.request_id,
        enqueued_ms=instant("enq_ms"), ready_ms=instant("ready_ms"), due_ms=instant("due_ms"),
        claimed_ms=instant("claim_ms"), finished_ms=instant("end_ms"),
        lease_expires_ms=int(lease_score) if lease_score is not None else None,
        worker=m["worker"] or None, cancel_requested=m["cancel"] == 1,
        reason=m["reason"] or None, error=error.decode(errors="replace") if error else None,
        payload=env.kwargs,
    )

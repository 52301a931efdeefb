"""The job record as Redis stores it ('|'-joined plain values, see
lua/_lib.lua) and its decoding into a JobRecord. No Redis access."""

from __future__ import annotations

from typing import Any

from .. import codec
from ..errors import MalformedJob
from ..models import ErrorEntry, JobRecord, Progress, RunLog


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


RECORD_FIELDS = (
    "state", "token", "attempt", "work_fail", "infra_fail", "max_attempts", "max_infra",
    "cancel", "started", "prio", "seq", "enq_ms", "ready_ms", "due_ms", "claim_ms", "end_ms",
    "name", "worker", "reason",
)
# version 1 (still read): no `started`; a leased v1 record counted its attempt at claim
RECORD_FIELDS_V1 = tuple(f for f in RECORD_FIELDS if f != "started")
# version 3: version 2 and the job's park group (claim.lua); a version-2 record reads grp ""
RECORD_FIELDS_V3 = (*RECORD_FIELDS, "grp")
# version 4: a job as enqueued, queued and never claimed (lua/_lib.lua,
# RECORD_PATTERN_V4): these fields only, the others implied
RECORD_FIELDS_V4 = ("prio", "seq", "enq_ms", "max_attempts", "max_infra", "name", "grp")
_V4_IMPLIED: dict[str, str | int] = {
    "state": "queued", "token": 0, "attempt": 0, "work_fail": 0, "infra_fail": 0, "cancel": 0,
    "started": 0, "due_ms": 0, "claim_ms": 0, "end_ms": 0, "worker": "", "reason": ""}
_TEXT = frozenset(("state", "name", "worker", "reason", "grp"))

# claim order (lua/_lib.lua): the ready set's score is (PRIO_OFFSET - priority) *
# SEQ_SPAN + sequence number; a score from LINE_FLOOR on is of a negative priority,
# claimed after the line (the queued jobs of priority 0)
PRIO_OFFSET, SEQ_SPAN = 32767, 2**36
LINE_FLOOR = (PRIO_OFFSET + 1) * SEQ_SPAN

# the error history (see push_error in lua/_lib.lua)
ERROR_RS, ERROR_US = "\x1e", "\x1f"
MAX_ERROR_TEXT = 4000


def record_text(value: str) -> str:
    """Free text bound for a record field (a dead reason, which a handler's
    PermanentError subclass names): no '|', which separates the fields, and
    no NUL, which starts the payload kept inside the record."""
    return value.replace("|", "/").replace("\0", "")


# what ends a record's fields when its payload follows them (PAYLOAD_MARK in lua/_lib.lua)
PAYLOAD_MARK = b"|\0"


def split_record(raw: bytes) -> tuple[bytes, bytes | None]:
    """A stored record's fields and the payload kept inside it, after
    PAYLOAD_MARK (None: the payload is in the payloads hash; see split_record
    in lua/_lib.lua)."""
    fields, mark, payload = raw.partition(PAYLOAD_MARK)
    return fields, payload if mark else None


def parse_record(raw: bytes) -> dict[str, Any]:
    """The '|'-joined job record (see lua/_lib.lua), version 2, 3, 4 or 1, as
    a dict with every RECORD_FIELDS_V3 name; ValueError if malformed. A
    payload inside it is left out (split_record reads it)."""
    parts = split_record(raw)[0].decode().split("|")
    version = parts[0]
    fields = {"2": RECORD_FIELDS, "3": RECORD_FIELDS_V3, "4": RECORD_FIELDS_V4,
              "1": RECORD_FIELDS_V1}.get(version)
    if fields is None or len(parts) != len(fields) + 1 or (version == "3" and not parts[-1]):
        raise ValueError("not a version-1, 2, 3 or 4 record")
    m = {name: value if name in _TEXT else int(value)
         for name, value in zip(fields, parts[1:], strict=True)}
    if version == "4":
        m.update(_V4_IMPLIED, ready_ms=m["enq_ms"])
    elif version == "1":
        m["started"] = 1 if m["state"] == "leased" else 0
    m.setdefault("grp", "")
    return m


def error_text(text: str) -> str:
    """An error text as the scripts keep it: capped, without the separators."""
    clean = text.replace(ERROR_RS, " ").replace(ERROR_US, " ")
    if len(clean) > MAX_ERROR_TEXT:
        clean = clean[:MAX_ERROR_TEXT - 15] + " ...[truncated]"
    return clean


def parse_errors(raw: bytes | None) -> list[ErrorEntry]:
    """The error history, oldest first; a plain text (written before the
    history) is one entry of kind '' and attempt 0."""
    return [ErrorEntry(*fields) if fields else ErrorEntry(0, "", 0, entry)
            for entry, fields in _entries(raw)]


def _entries(raw: bytes | None) -> list[tuple[str, tuple[int, str, int, str] | None]]:
    """A history as lua/_lib.lua push_entry keeps it: each entry with its
    (attempt, kind, at_ms, text), or None when it is not in that shape."""
    if not raw:
        return []
    out: list[tuple[str, tuple[int, str, int, str] | None]] = []
    for entry in raw.decode(errors="replace").split(ERROR_RS):
        parts = entry.split(ERROR_US, 3)
        if len(parts) == 4 and parts[0].isdigit() and parts[2].isdigit():
            out.append((entry, (int(parts[0]), parts[1], int(parts[2]), parts[3])))
        else:
            out.append((entry, None))
    return out


def clean_log_text(text: str) -> str:
    """A captured log line as the scripts keep it: no record separators."""
    return text.replace(ERROR_RS, " ").replace(ERROR_US, " ")


def parse_logs(raw: bytes | None) -> list[RunLog]:
    """The captured logs of a job's last runs, oldest first (see push_log in
    lua/_lib.lua)."""
    return [RunLog(f[0], f[1], f[2], f[3].split("\n") if f[3] else [])
            for _, f in _entries(raw) if f is not None]


def decode_record(job_id: str, queue: str, raw: bytes | None, lease_score: float | None,
                  envelope: bytes | None, error: bytes | None) -> JobRecord | None:
    """Decode a job from its record, payload envelope and error history; raise
    MalformedJob when the record or the envelope cannot be decoded. A payload
    inside the record is the job's; ``envelope`` (the payloads hash's entry)
    is read only for a record without one."""
    if raw is None:
        return None
    fields, inline = split_record(raw)
    try:
        m = parse_record(fields)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJob(f"job {job_id} in queue {queue}: record is malformed ({exc})") from exc
    env = codec.decode_envelope(inline if inline is not None else envelope or b"", job_id)
    errors = parse_errors(error)

    def instant(name: str) -> int | None:
        return m[name] or None

    return JobRecord(
        id=job_id, queue=queue, name=m["name"], state=m["state"], attempt=m["attempt"],
        token=m["token"], work_failures=m["work_fail"], infra_failures=m["infra_fail"],
        max_attempts=m["max_attempts"] or None, max_infra_attempts=m["max_infra"] or None,
        priority=m["prio"],
        correlation_id=env.correlation_id, request_id=env.request_id,
        enqueued_ms=instant("enq_ms"), ready_ms=instant("ready_ms"), due_ms=instant("due_ms"),
        claimed_ms=instant("claim_ms"), finished_ms=instant("end_ms"),
        lease_expires_ms=int(lease_score) if lease_score is not None else None,
        worker=m["worker"] or None, cancel_requested=m["cancel"] == 1,
        reason=m["reason"] or None, error=errors[-1].text if errors else None,
        payload=env.kwargs, errors=errors, rerun_of=env.rerun_of or None,
    )


def parse_progress(raw: bytes | None) -> Progress | None:
    """A job's last progress as runstate.lua stores it: `at_ms US fraction US note`."""
    if not raw:
        return None
    parts = text(raw).split(ERROR_US, 2)
    if len(parts) != 3:
        return None
    try:
        return Progress(float(parts[1]), parts[2], int(parts[0]))
    except ValueError:
        return None

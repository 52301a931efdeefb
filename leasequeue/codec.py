"""The only place msgpack is called: payloads and results to bytes and back.

It never talks to Redis; size limits are checked here so nothing oversized
reaches a script."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import MalformedJob, PayloadNotSerializable, PayloadTooLarge

DEFAULT_MAX_PAYLOAD = 512 * 1024


ENVELOPE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a job carries that Lua never reads: its ids and keyword arguments."""

    correlation_id: str
    request_id: str
    kwargs: dict[str, Any]
    rerun_of: str = ""  # the job this one re-runs ('' = none)


def encode_envelope(payload: dict[str, Any] | None, correlation_id: str, request_id: str,
                    limit: int = DEFAULT_MAX_PAYLOAD, rerun_of: str = "") -> bytes:
    """The stored payload: [version, correlation id, request id, kwargs] as
    msgpack, and a fifth element {"rerun_of": id} for a re-run (App.rerun).
    The size limit counts the encoded kwargs. Raises a PayloadError before
    anything is stored."""
    head = [ENVELOPE_VERSION, correlation_id, request_id]
    body: list[Any] = [*head, _kwargs(payload)]
    if rerun_of:
        body.append({"rerun_of": rerun_of})
    data = _pack(body, "payload")
    # both arrays have a one-byte header, so the difference is the kwargs alone
    size = len(data) - len(_pack(head, "payload"))
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return data


def decode_envelope(data: bytes, job_id: str = "?") -> Envelope:
    value = _unpack(data, job_id)
    if (not isinstance(value, list) or len(value) not in (4, 5)
            or value[0] != ENVELOPE_VERSION or not isinstance(value[3], dict)
            or (len(value) == 5 and not isinstance(value[4], dict))):
        raise MalformedJob(f"job {job_id}: payload is not a leasequeue envelope")
    extra = value[4] if len(value) == 5 else {}
    return Envelope(str(value[1]), str(value[2]), value[3], str(extra.get("rerun_of", "")))


def _kwargs(payload: dict[str, Any] | None) -> dict[str, Any]:
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise PayloadNotSerializable(
            f"payload must be a dict of keyword arguments, not {type(payload).__name__}"
        )
    for key in payload:
        if not isinstance(key, str):
            raise PayloadNotSerializable(f"payload keys must be str, not {type(key).__name__}")
    return payload


def encode_result(result: Any) -> bytes:
    """Encode a handler's return value (None is stored as nothing)."""
    if result is None:
        return b""
    return _pack(result, "result")


def _pack(value: Any, what: str) -> bytes:
    try:
        data: bytes = msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadNotSerializable(f"{what} cannot be encoded with msgpack: {exc}") from exc
    return data


def decode_result(data: bytes | None, job_id: str = "?") -> Any:
    if not data:
        return None
    return _unpack(data, job_id)


def _unpack(data: bytes, job_id: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedJob(f"job {job_id}: stored bytes are not valid msgpack: {exc}") from exc


def encode_state(value: Any, what: str) -> bytes:
    """Encode a run's checkpoints or saga record (PayloadNotSerializable when
    msgpack cannot)."""
    return _pack(value, what)


def decode_state(data: bytes | None, job_id: str = "?") -> Any:
    """A stored checkpoints map or saga record (None: none stored)."""
    return decode_result(data, job_id)

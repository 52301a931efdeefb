"""The only place msgpack is called: payloads and results to bytes and back.

It never talks to Redis; size limits are checked here so nothing oversized
reaches a script."""

from __future__ import annotations

from typing import Any

import msgpack

from .errors import MalformedJob, PayloadNotSerializable, PayloadTooLarge

DEFAULT_MAX_PAYLOAD = 512 * 1024


def encode_payload(payload: dict[str, Any] | None, limit: int = DEFAULT_MAX_PAYLOAD) -> bytes:
    """Encode a job's keyword arguments; raise a PayloadError before anything is stored."""
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise PayloadNotSerializable(
            f"payload must be a dict of keyword arguments, not {type(payload).__name__}"
        )
    for key in payload:
        if not isinstance(key, str):
            raise PayloadNotSerializable(f"payload keys must be str, not {type(key).__name__}")
    data = _pack(payload, "payload")
    if len(data) > limit:
        raise PayloadTooLarge(len(data), limit)
    return data


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


def decode_payload(data: bytes, job_id: str = "?") -> dict[str, Any]:
    if not data:
        return {}
    value = _unpack(data, job_id)
    if not isinstance(value, dict):
        raise MalformedJob(f"job {job_id}: payload is not a dict of keyword arguments")
    return value


def decode_result(data: bytes | None, job_id: str = "?") -> Any:
    if not data:
        return None
    return _unpack(data, job_id)


def _unpack(data: bytes, job_id: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedJob(f"job {job_id}: stored bytes are not valid msgpack: {exc}") from exc

"""The only place msgpack is called: payloads and results to bytes and back.

It never talks to Redis; size limits are checked here so nothing oversized
reaches a script. Decoding trusts nothing it reads from Redis: a stored
payload over DECODE_MAX_BYTES, a container or string longer than the bytes
that carry it, or nesting deeper than MAX_DEPTH is MalformedJob (the worker
dead-letters the job as ``bad-payload``) before it can exhaust memory. Never
pickle: msgpack builds plain values only."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import MalformedJob, PayloadNotSerializable, PayloadTooLarge

DEFAULT_MAX_PAYLOAD = 512 * 1024
# the largest stored payload envelope a worker decodes (16x the default
# payload limit; App refuses a max_payload_bytes above half of it)
DECODE_MAX_BYTES = 16 * DEFAULT_MAX_PAYLOAD
# the deepest nesting of lists and dicts a payload or a result may have (an
# enqueue refuses a deeper payload; decoding a deeper one is MalformedJob)
MAX_DEPTH = 100


ENVELOPE_VERSION = 1


@dataclass(slots=True)  # not frozen: built once per run, and a frozen __init__ costs ~1 us
class Envelope:
    """What a job carries that Lua never reads: its ids and keyword arguments."""

    correlation_id: str
    request_id: str
    kwargs: dict[str, Any]
    rerun_of: str = ""  # the job this one re-runs ('' = none)
    # string entries hooks add at enqueue (a trace context): Hooks.before_enqueue
    headers: dict[str, str] | None = None


def encode_envelope(payload: dict[str, Any] | None, correlation_id: str, request_id: str,
                    limit: int = DEFAULT_MAX_PAYLOAD, rerun_of: str = "",
                    headers: dict[str, str] | None = None) -> bytes:
    """The stored payload: [version, correlation id, request id, kwargs] as
    msgpack (a correlation id of '' is the job's own id: a producer stores ''
    for it, 32 bytes less per job, and decode_envelope and Lua's
    envelope_corr read it back as the id), and a fifth element
    {"rerun_of": id, "headers": {...}} for a re-run (App.rerun) or hook
    headers (a trace context); a reader ignores entries of it that it does
    not know. The size limit counts the encoded kwargs. Raises a
    PayloadError before anything is stored."""
    if (payload is None and not correlation_id and not request_id and not rerun_of
            and not headers and len(EMPTY_ENVELOPE) <= limit):
        return EMPTY_ENVELOPE  # a job with no payload and its own id: the same bytes always
    kwargs = _kwargs(payload)
    body: list[Any] = [ENVELOPE_VERSION, correlation_id, request_id, kwargs]
    if rerun_of or headers:
        extra: dict[str, Any] = {}
        if rerun_of:
            extra["rerun_of"] = rerun_of
        if headers:
            extra["headers"] = headers
        body.append(extra)
    data = _pack(body, "payload")
    if len(data) > MAX_DEPTH and not within_depth(kwargs):
        raise PayloadNotSerializable(f"payload is nested deeper than {MAX_DEPTH} levels "
                                     "(a worker would refuse to decode it)")
    if len(data) > limit:  # the kwargs alone may still fit: measure them
        size = len(_pack(kwargs, "payload"))
        if size > limit:
            raise PayloadTooLarge(size, limit)
    return data


def decode_envelope(data: bytes, job_id: str) -> Envelope:
    """Job ``job_id``'s payload envelope (an empty correlation id is the id)."""
    size = len(data)
    if size > DECODE_MAX_BYTES:
        raise MalformedJob(f"job {job_id}: stored payload is {size} bytes, over the "
                           f"decoding limit of {DECODE_MAX_BYTES} bytes")
    value = _unpack(data, job_id)
    # the common shape first (no headers, no re-run): exact types, as msgpack makes them
    if (type(value) is list and len(value) == 4 and value[0] == ENVELOPE_VERSION
            and type(value[1]) is str and type(value[2]) is str and type(value[3]) is dict):
        if size > MAX_DEPTH:
            _check_depth(value[3], size, job_id, "payload")
        return Envelope(value[1] or job_id, value[2], value[3])
    if (not isinstance(value, list) or len(value) not in (4, 5)
            or value[0] != ENVELOPE_VERSION or not isinstance(value[3], dict)
            or not isinstance(value[1], str) or not isinstance(value[2], str)
            or (len(value) == 5 and not isinstance(value[4], dict))):
        raise MalformedJob(f"job {job_id}: payload is not a leasequeue envelope")
    _check_depth(value[3], size, job_id, "payload")
    extra = _check_depth(value[4], size, job_id, "envelope") if len(value) == 5 else {}
    headers = extra.get("headers")
    return Envelope(value[1] or job_id, value[2], value[3], str(extra.get("rerun_of", "")),
                    {str(k): str(v) for k, v in headers.items()}
                    if isinstance(headers, dict) else None)


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


def within_depth(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when lists / tuples / dicts in ``value`` nest at most ``limit``
    deep; level by level, without recursion, so a hostile value cannot
    exhaust the Python stack (a flat dict costs well under a microsecond)."""
    level = [value] if isinstance(value, (dict, list, tuple)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        below: list[Any] = []
        for item in level:
            for child in (item.values() if isinstance(item, dict) else item):
                if isinstance(child, (dict, list, tuple)):
                    below.append(child)
        level = below
    return True


def encode_result(result: Any) -> bytes:
    """Encode a handler's return value (None is stored as nothing)."""
    if result is None:
        return b""
    data = _pack(result, "result")
    if len(data) > MAX_DEPTH and not within_depth(result):
        raise PayloadNotSerializable(f"result is nested deeper than {MAX_DEPTH} levels")
    return data


# One Packer per thread: msgpack.packb makes a Packer (and its buffer) per
# call, 0.7 of its 1.2 us for a small payload; a Packer is not safe to share
# between threads (one buffer), and nothing it packs runs Python code (no
# `default`), so a thread never re-enters its own. Its buffer starts small
# and stays at the largest value the thread packed (at most about the
# payload limit), and is emptied after every pack, a failed one too.
_packers = threading.local()


def _packer() -> msgpack.Packer:
    try:  # a small first buffer (it grows); an older msgpack may take no buf_size
        packer: msgpack.Packer = msgpack.Packer(use_bin_type=True, buf_size=4096)
    except TypeError:
        packer = msgpack.Packer(use_bin_type=True)
    _packers.packer = packer
    return packer


def _pack(value: Any, what: str) -> bytes:
    try:
        packer: msgpack.Packer = _packers.packer
    except AttributeError:
        packer = _packer()
    try:
        data: bytes = packer.pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadNotSerializable(f"{what} cannot be encoded with msgpack: {exc}") from exc
    return data


# the stored envelope of a job with no payload whose correlation id is its
# own and that has no request id (encode_envelope's common case)
EMPTY_ENVELOPE = _pack([ENVELOPE_VERSION, "", "", {}], "payload")


def decode_result(data: bytes | None, job_id: str = "?") -> Any:
    if not data:
        return None
    return _check_depth(_unpack(data, job_id), len(data), job_id, "result")


def _unpack(data: bytes, job_id: str) -> Any:
    # every length is bounded by the bytes that carry it: msgpack >= 1.0 (our
    # floor, pyproject.toml) sets max_str/bin/array/map/ext_len from
    # len(data) in unpackb, so a header claiming 4 billion items in 5 bytes is
    # refused before any allocation (tested in test_security_payloads.py);
    # passing the five limits ourselves cost as much as the decoding
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        detail = str(exc) or type(exc).__name__  # a StackError (too deep) says nothing
        raise MalformedJob(f"job {job_id}: stored bytes are not valid msgpack: {detail}") from exc
    return value


def _check_depth(value: Any, size: int, job_id: str, what: str) -> Any:
    # every level of nesting costs at least one byte: a value decoded from
    # MAX_DEPTH bytes or fewer cannot be too deep (most payloads: no walk)
    if size > MAX_DEPTH and not within_depth(value):
        raise MalformedJob(f"job {job_id}: stored {what} is nested deeper than {MAX_DEPTH} "
                           "levels")
    return value


def encode_state(value: Any, what: str) -> bytes:
    """Encode a run's checkpoints or saga record (PayloadNotSerializable when
    msgpack cannot)."""
    return _pack(value, what)


def decode_state(data: bytes | None, job_id: str = "?") -> Any:
    """A stored checkpoints map or saga record (None: none stored)."""
    return decode_result(data, job_id)

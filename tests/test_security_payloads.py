"""Hostile payloads: a job payload crafted in Redis (lengths that claim
gigabytes, nesting thousands deep, an oversized blob, ids that are not text)
is dead-lettered as ``bad-payload`` by a running worker without allocating
what it claims, and the rest of the queue runs on. No pickle anywhere."""

from __future__ import annotations

import ast
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import pytest

import leasequeue
from leasequeue import App, ConfigError, Context, JobRequest, MalformedJob
from leasequeue.codec import (
    DECODE_MAX_BYTES,
    MAX_DEPTH,
    decode_envelope,
    decode_result,
    encode_envelope,
    within_depth,
)
from leasequeue.errors import PayloadNotSerializable
from tests.helpers import eventually, plant_payload, worker_running

pytestmark = pytest.mark.anyio

Q = "default"
HEAD = b"\x94\x01\xa0\xa0"  # a 4-item envelope: version 1, "", "" then the kwargs


def nested(depth: int) -> bytes:
    """kwargs {"a": [[[...nil...]]]} with ``depth`` list levels."""
    return b"\x81\xa1a" + b"\x91" * depth + b"\xc0"


HOSTILE: dict[str, bytes] = {
    # map32 header claiming 4,294,967,295 entries, in 9 bytes
    "huge-map": HEAD + b"\xdf" + struct.pack(">I", 0xFFFFFFFF),
    # a str32 of 4 GiB, and an array32 of 4 billion items, as the kwargs' value
    "huge-str": HEAD + b"\x81\xa1a\xdb" + struct.pack(">I", 0xFFFFFFFF) + b"x",
    "huge-array": HEAD + b"\x81\xa1a\xdd" + struct.pack(">I", 0xFFFFFFFF) + b"\xc0",
    "bin-claims-more": HEAD + b"\x81\xa1a\xc6" + struct.pack(">I", 1 << 30) + b"\x00" * 16,
    # deeper than MAX_DEPTH, and deeper than msgpack's own stack (1024)
    "deep": HEAD + nested(MAX_DEPTH + 1),
    "deeper-than-msgpack": HEAD + nested(5000),
    # a correlation id that is a deep structure instead of text
    "id-not-text": b"\x94\x01" + b"\x91" * 900 + b"\xc0" + b"\xa0\x80",
    # over the decoding limit (a valid envelope, one big bin)
    "oversized": msgpack.packb([1, "", "", {"a": b"\x00" * (DECODE_MAX_BYTES + 1)}]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_bytes_are_malformed_without_allocating_what_they_claim(name: str) -> None:
    data = HOSTILE[name]
    tracemalloc.start()
    try:
        with pytest.raises(MalformedJob, match=f"job {name}"):
            decode_envelope(data, name)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # never more than a small multiple of the bytes themselves (the claims
    # are gigabytes)
    assert peak < 2 * len(data) + 1_000_000, (name, peak)


def test_depth_is_bounded_both_ways() -> None:
    ok: Any = None
    for _ in range(MAX_DEPTH - 1):
        ok = [ok]
    assert within_depth({"a": ok})
    assert decode_envelope(encode_envelope({"a": ok}, "", ""), "j").kwargs == {"a": ok}
    deep = [ok]
    assert not within_depth({"a": deep})
    with pytest.raises(PayloadNotSerializable, match="nested deeper than"):
        encode_envelope({"a": deep}, "", "")  # refused at enqueue: no worker would decode it
    with pytest.raises(MalformedJob, match="result is nested deeper"):
        decode_result(msgpack.packb({"a": deep}), "r")


def test_payload_limit_must_fit_the_decoding_limit() -> None:
    with pytest.raises(ConfigError, match="max_payload_bytes"):
        App("memory://limits", max_payload_bytes=DECODE_MAX_BYTES)
    with pytest.raises(ConfigError, match="max_payload_bytes"):
        App("memory://limits", max_payload_bytes=0)


async def test_worker_dead_letters_hostile_payloads_and_runs_the_rest(real_app: App) -> None:
    app = real_app
    ran: list[int] = []

    @app.job(max_attempts=3)
    async def ok(ctx: Context, i: int) -> None:
        ran.append(i)

    await app.enqueue_many([JobRequest("ok", {"i": i}, job_id=f"ok{i}") for i in range(10)])
    await app.enqueue_many([JobRequest("ok", {"i": -1}, job_id=name) for name in HOSTILE])
    for name, data in HOSTILE.items():
        await plant_payload(app, app.keys(Q), name, data)
    async with worker_running(app):
        await eventually(lambda: _dead_count(app, len(HOSTILE)), limit=30,
                         what="every hostile job to be dead")
        await eventually(lambda: _all_succeeded(app, [f"ok{i}" for i in range(10)]),
                         what="the sound jobs")
    assert sorted(ran) == list(range(10))
    letters = {e["job"]: e for e in await app.dead_letters(Q, count=50)}
    assert set(letters) == set(HOSTILE)
    for name, letter in letters.items():
        assert letter["reason"] == "bad-payload", letter
        assert letter["attempt"] == "1", letter  # not retried in vain
        with pytest.raises(MalformedJob):
            await app.get_job(name)  # a typed error for the operator too
    assert await app.purge_dead(Q) == len(HOSTILE)


async def _dead_count(app: App, n: int) -> bool:
    return (await app.stats(Q)).dead == n


async def _all_succeeded(app: App, ids: list[str]) -> bool:
    for job_id in ids:
        if (await app.get_job(job_id)).state != "succeeded":
            return False
    return True


# modules that turn bytes into arbitrary objects (or code), and the builtins
# that run text as code: none of them may appear in the package
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                  "jsonpickle", "joblib", "yaml"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}


def test_no_pickle_marshal_or_eval_in_the_package() -> None:
    root = Path(leasequeue.__file__).parent
    found: list[str] = []
    files = sorted(root.rglob("*.py"))
    assert len(files) > 30
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in UNSAFE_CALLS:
                    found.append(f"{path.name}:{node.lineno} calls {node.func.id}()")
            elif isinstance(node, ast.Attribute) and node.attr in ("loads", "load") and (
                    isinstance(node.value, ast.Name) and node.value.id in UNSAFE_MODULES):
                found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
            found += [f"{path.name}:{node.lineno} imports {n}" for n in names
                      if n in UNSAFE_MODULES]
    assert found == []
    # and msgpack is only called in codec.py, without hooks that build objects
    for path in files:
        text = path.read_text()
        if path.name != "codec.py":
            assert "msgpack." not in text, path
        assert "object_hook" not in text and "ext_hook" not in text, path

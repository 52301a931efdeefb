"""The payload codec's fast paths (leasequeue/codec.py): the envelope of a job
with no payload is one constant, and each thread packs with a Packer of its
own. Each must give the very bytes msgpack.packb gives, and refuse what it
refused."""

from __future__ import annotations

import threading
from typing import Any

import msgpack
import pytest

from leasequeue import codec
from leasequeue.errors import PayloadNotSerializable, PayloadTooLarge
from leasequeue.models import EnqueuedJob


def reference(payload: dict[str, Any] | None, corr: str, req: str,
              extra: dict[str, Any] | None = None) -> bytes:
    body: list[Any] = [codec.ENVELOPE_VERSION, corr, req, payload or {}]
    if extra:
        body.append(extra)
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


def test_the_empty_envelope_is_the_one_packb_makes() -> None:
    assert codec.EMPTY_ENVELOPE == reference(None, "", "")
    assert codec.encode_envelope(None, "", "") is codec.EMPTY_ENVELOPE
    envelope = codec.decode_envelope(codec.EMPTY_ENVELOPE, "job-1")
    assert (envelope.correlation_id, envelope.request_id, envelope.kwargs) == ("job-1", "", {})


@pytest.mark.parametrize("corr, req, rerun_of, headers", [
    ("corr-1", "", "", None),
    ("", "req-1", "", None),
    ("", "", "job-0", None),
    ("", "", "", {"traceparent": "00-ab-cd-01"}),
])
def test_a_job_with_no_payload_but_any_id_or_header_keeps_it(
        corr: str, req: str, rerun_of: str, headers: dict[str, str] | None) -> None:
    """Only the envelope with nothing in it is the constant: a correlation id,
    a request id, a re-run's origin or a hook's header each goes in."""
    data = codec.encode_envelope(None, corr, req, rerun_of=rerun_of, headers=headers)
    extra: dict[str, Any] = {}
    if rerun_of:
        extra["rerun_of"] = rerun_of
    if headers:
        extra["headers"] = headers
    assert data == reference(None, corr, req, extra)
    envelope = codec.decode_envelope(data, "job-1")
    assert envelope.correlation_id == (corr or "job-1")
    assert (envelope.request_id, envelope.rerun_of, envelope.headers) == (req, rerun_of, headers)


def test_a_payload_limit_below_the_empty_envelope_still_refuses_it() -> None:
    """The constant is no way around the size limit: with a limit of 0, even
    no payload (its kwargs pack to one byte) is too large, as before."""
    with pytest.raises(PayloadTooLarge):
        codec.encode_envelope(None, "", "", limit=0)


def test_a_failed_pack_leaves_the_thread_s_packer_clean() -> None:
    """A payload msgpack cannot encode raises PayloadNotSerializable, and the
    next payload packed on the same thread comes out whole (no bytes of the
    failed one left in the thread's Packer)."""
    good = {"to": "ada@example.com", "n": [1, 2, 3]}
    for bad in ({"half": "written", "then": object()}, {"big": 2 ** 70}, {"s": {1, 2}}):
        with pytest.raises(PayloadNotSerializable):
            codec.encode_envelope(bad, "", "")
        assert codec.encode_envelope(good, "", "") == reference(good, "", "")


def test_threads_packing_at_once_each_get_their_own_bytes() -> None:
    """Eight threads encode different payloads at once (a WSGI service's
    SyncApp): every envelope is exactly packb's for its own payload."""
    wrong: list[int] = []
    start = threading.Barrier(8)

    def encode(k: int) -> None:
        start.wait()
        for i in range(2_000):
            payload = {"thread": k, "i": i, "text": "x" * (k * 37 + i % 50)}
            if codec.encode_envelope(payload, "", f"r{k}") != reference(payload, "", f"r{k}"):
                wrong.append(k)

    threads = [threading.Thread(target=encode, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_an_enqueued_job_is_immutable_plain_data() -> None:
    job = EnqueuedJob("id-1", "default", "noop", True, "queued")
    assert (job.id, job.queue, job.name, job.created, job.state) == (
        "id-1", "default", "noop", True, "queued")
    assert job == EnqueuedJob("id-1", "default", "noop", True, "queued")
    assert hash(job) == hash(EnqueuedJob("id-1", "default", "noop", True, "queued"))
    assert repr(job) == ("EnqueuedJob(id='id-1', queue='default', name='noop', "
                         "created=True, state='queued')")
    with pytest.raises(AttributeError):
        job.created = False  # type: ignore[misc]

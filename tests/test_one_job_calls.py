"""One enqueue per call is packed onto a head kept per (queue, job name)
(scripts.OneJobCalls): the bytes must be exactly those of packing the
general path's arguments whole, and a job sent that way must be stored
exactly as one sent the general way, by the async and the sync producer,
on a direct connection, after a SCRIPT FLUSH and on a connection redis-py
parses itself (what a Sentinel connection does)."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Iterator
from enum import IntEnum
from typing import Any

import pytest
import redis as redis_sync
from redis._parsers import _AsyncRESP2Parser, _RESP2Parser
from redis.asyncio import Redis

from leasequeue import App, JobRequest, SyncApp
from leasequeue.errors import ConfigError
from leasequeue.models import NewJob
from leasequeue.store import direct, scripts, sync_lane
from leasequeue.store.direct import _pack_evalsha
from leasequeue.store.keys import CACHED_QUEUES, QueueKeys
from leasequeue.store.loader import lua_dir, script_source
from leasequeue.store.record import split_record
from leasequeue.store.scripts import INLINE_MAX, ONE_JOB_HEADS, OneJobCalls, enqueue_args
from leasequeue.store.settings import StoreSettings
from leasequeue.store.specs import SPECS
from tests.harness.redis_proc import RedisProcess

SHA = "e" * 40
LINE_SHA = "1" * 40


def _keys(name: str, qk: QueueKeys) -> list[bytes]:
    return [getattr(qk, k).encode() for k in SPECS[name].keys]


def _packed(calls: OneJobCalls, settings: StoreSettings, qk: QueueKeys, job: NewJob) -> bytes:
    call = calls.call(settings, qk, job, _keys)
    assert call is not None
    return call[0]


def _line(settings: StoreSettings, job: NewJob) -> bool:
    """The rule: enqueue_one.lua takes a job queued now at priority 0 whose
    payload its record holds, when nothing asks for an audit trail."""
    return (job.delay_ms == 0 and job.priority == 0 and len(job.payload) <= INLINE_MAX
            and not settings.audit_all)


def _want(settings: StoreSettings, qk: QueueKeys, job: NewJob) -> tuple[bytes, list[bytes], str]:
    """The call as hiredis packs it whole: enqueue_one.lua's ARGV (its spec's
    order), or enqueue.lua's (enqueue_args)."""
    if _line(settings, job):
        keys = _keys("enqueue_one", qk)
        args = [settings.wake_cap, job.name, job.max_attempts, job.max_infra, job.grp,
                job.payload, job.id]
        assert len(args) == len(SPECS["enqueue_one"].argv)
        return _pack_evalsha(LINE_SHA, keys, args), keys, "enqueue_one"
    keys = _keys("enqueue", qk)
    return _pack_evalsha(SHA, keys, enqueue_args(settings, [job])), keys, "enqueue"


def _same(got: bytes, want: bytes) -> None:
    """Equal bytes, or a short message naming the first difference: pytest's
    own diff of two 70 kB byte strings runs for minutes where CI is set (it
    turns truncation off), and a planted bug then times out uncaught."""
    if got == want:
        return
    pairs = enumerate(zip(got, want, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(got), len(want)))
    pytest.fail(f"bytes differ at offset {at} (lengths {len(got)} and {len(want)}): "
                f"got {got[max(0, at - 40):at + 40]!r}, want {want[max(0, at - 40):at + 40]!r}")


def _jobs() -> Iterator[NewJob]:
    rng = random.Random(11)
    names = ["j", "send_mail", "ünï", "x" * 200]
    for i in range(600):
        yield NewJob(
            id=rng.choice([f"{i:028x}", "id-" + "é" * rng.randint(1, 40), str(i)]),
            name=rng.choice(names),
            payload=rng.randbytes(rng.choice([1, 5, 300, INLINE_MAX, INLINE_MAX + 1, 70_000])),
            delay_ms=rng.choice([0, 0, 0, 1, 255, 256, 1500, 10**11]),
            priority=rng.choice([0, 0, 0, -1, -2, -32767, 5, 255, 256, 32767]),
            max_attempts=rng.choice([0, 1, 25, 1000]),
            max_infra=rng.choice([0, 3, 300]),
            grp=rng.choice(["", "rate:tenant-7", "ü"]),
        )


def test_the_bytes_are_those_of_the_whole_call_packed() -> None:
    calls = OneJobCalls(SHA, LINE_SHA)
    settings = StoreSettings()
    queues = [QueueKeys("lq", "default"), QueueKeys("lq", "other"), QueueKeys("p2", "default")]
    scripts_called = set()
    for job in _jobs():
        for qk in queues:
            call = calls.call(settings, qk, job, _keys)
            want = _want(settings, qk, job)
            assert call is not None and call[1:] == want[1:]
            _same(call[0], want[0])
            scripts_called.add(call[2])
            # asked for enqueue.lua (enqueue_one.lua found the id): enqueue.lua
            general = calls.call(settings, qk, job, _keys, line=False)
            assert general is not None and general[2] == "enqueue"
            _same(general[0], _pack_evalsha(SHA, _keys("enqueue", qk),
                                            enqueue_args(settings, [job])))
    assert scripts_called == {"enqueue", "enqueue_one"}


def test_a_job_goes_to_enqueue_one_only_when_queued_now_in_line_inline_and_unaudited() -> None:
    calls = OneJobCalls(SHA, LINE_SHA)
    qk = QueueKeys("lq", "default")
    plain = NewJob("id", "j", b"\x94\x01\xa0\xa0\x80", 0, 0, 3, 5, "t:1")
    settings, audited = StoreSettings(), StoreSettings(audit_all=True)
    cases = [(plain, settings, "enqueue_one"),
             (plain._replace(payload=b"p" * INLINE_MAX), settings, "enqueue_one"),
             (plain._replace(payload=b"p" * (INLINE_MAX + 1)), settings, "enqueue"),
             (plain._replace(delay_ms=1), settings, "enqueue"),
             (plain._replace(priority=1), settings, "enqueue"),
             (plain._replace(priority=-1), settings, "enqueue"),
             (plain, audited, "enqueue")]
    for job, s, script in cases:
        call = calls.call(s, qk, job, _keys)
        assert call is not None and call[2] == script, (job, s.audit_all)


def test_other_settings_get_other_heads() -> None:
    calls = OneJobCalls(SHA, LINE_SHA)
    qk = QueueKeys("lq", "default")
    plain = next(j for j in _jobs() if _line(StoreSettings(), j))
    other = next(j for j in _jobs() if not _line(StoreSettings(), j))
    for job in (plain, other):
        for settings in (StoreSettings(),
                         StoreSettings(events_maxlen=5, audit_all=True, wake_cap=2),
                         StoreSettings(wake_cap=3), StoreSettings()):
            _same(_packed(calls, settings, qk, job), _want(settings, qk, job)[0])


def test_a_job_the_head_cannot_carry_goes_the_general_way() -> None:
    calls = OneJobCalls(SHA, LINE_SHA)
    qk = QueueKeys("lq", "default")
    job = next(_jobs())
    assert calls.call(StoreSettings(), qk, job._replace(payload=b""), _keys) is None
    # text UTF-8 cannot encode: the general path raises what redis-py says of it
    assert calls.call(StoreSettings(), qk, job._replace(id="\ud800"), _keys) is None
    assert calls.call(StoreSettings(), qk, job._replace(grp="\udfff"), _keys) is None


def test_the_heads_kept_are_bounded() -> None:
    """Three times ONE_JOB_HEADS job names, each packed in both scripts'
    shapes: never more than ONE_JOB_HEADS heads kept (two for each of
    CACHED_QUEUES queues), every call's bytes still right."""
    assert ONE_JOB_HEADS == 2 * CACHED_QUEUES
    calls = OneJobCalls(SHA, LINE_SHA)
    settings = StoreSettings()
    qk = QueueKeys("lq", "default")
    job = next(_jobs())
    for i in range(ONE_JOB_HEADS * 3):
        named = job._replace(name=f"n{i}", priority=i % 2)  # both scripts' heads
        _same(_packed(calls, settings, qk, named), _want(settings, qk, named)[0])
        assert len(calls._current[1]) <= ONE_JOB_HEADS


@pytest.mark.anyio
async def test_a_bool_priority_is_refused_before_anything_is_written(
        redis_server: RedisProcess, prefix: str) -> None:
    """Sent alone, a bool would be formatted as 1 (a batch's hiredis packing
    refuses it): the producer refuses it first, on both clients."""
    app = _app(redis_server.url, prefix)
    try:
        with pytest.raises(ConfigError, match="priority"):
            await app.enqueue("mail", job_id="b", priority=True)
        with SyncApp(redis_server.url, prefix=prefix) as sync:
            with pytest.raises(ConfigError, match="priority"):
                sync.enqueue("mail", job_id="b", queue="mail", priority=True)
        assert (await app.stats("mail")).ready == 0
    finally:
        await app.close()


class Level(IntEnum):
    HIGH = 300


@pytest.mark.anyio
async def test_an_int_enum_is_sent_as_its_number_alone_and_in_a_batch(
        redis_server: RedisProcess, prefix: str) -> None:
    """An IntEnum priority or budget is an int: stored as its number whether
    the job goes alone (formatted onto a head) or in a batch (packed by
    hiredis, which refuses an int subclass)."""
    app = _app(redis_server.url, prefix)
    try:
        await app.enqueue("mail", job_id="alone", priority=Level.HIGH,
                          max_attempts=Level.HIGH)
        await app.enqueue_many([JobRequest("mail", job_id=f"batch-{i}", priority=Level.HIGH,
                                           max_attempts=Level.HIGH) for i in range(2)])
        with SyncApp(redis_server.url, prefix=prefix) as sync:
            sync.enqueue("mail", job_id="sync-alone", queue="mail", priority=Level.HIGH)
            sync.enqueue_many([JobRequest("mail", job_id=f"sync-{i}", queue="mail",
                                          priority=Level.HIGH) for i in range(2)])
        for job_id in ("alone", "batch-0", "batch-1", "sync-alone", "sync-0", "sync-1"):
            record = await app.get_job(job_id)
            assert record.priority == 300, job_id
        assert (await app.get_job("alone")).max_attempts == 300
    finally:
        await app.close()


# -- on a real Redis ---------------------------------------------------------


@pytest.fixture
def packed_only(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """Every one-job call's script and bytes; the general packing fails the
    test if a one-job enqueue reaches it."""
    sent: list[tuple[str, bytes]] = []
    real = OneJobCalls.call

    def call(self: OneJobCalls, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        assert out is not None
        sent.append((out[2], out[0]))
        return out

    one_job_shas = {hashlib.sha1(script_source(name, True).encode()).hexdigest()
                    for name in ("enqueue", "enqueue_one")}

    def general(sha: str, keys: Any, args: Any, command: str = "EVALSHA") -> bytes:
        assert sha not in one_job_shas, "a one-job enqueue was packed the general way"
        return _pack_evalsha(sha, keys, args, command)

    monkeypatch.setattr(OneJobCalls, "call", call)
    monkeypatch.setattr(direct, "_pack_evalsha", general)
    monkeypatch.setattr(sync_lane, "_pack_evalsha", general)
    return sent


# the scripts the enqueues below call: "a" (priority -3), "a" again (found by
# enqueue_one.lua, answered by enqueue.lua), "b" (delayed), "c" (plain)
CALLED = ["enqueue", "enqueue_one", "enqueue", "enqueue", "enqueue_one"]


def _stored_as_asked(record: Any, priority: int) -> None:
    assert record.name == "mail"
    assert record.payload == {"to": "ü@example.com", "n": [1, 2]}
    assert record.correlation_id == "corr-1"
    assert record.priority == priority
    assert record.max_attempts == 4


async def _async_enqueues(app: App) -> None:
    job = await app.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="a",
                            priority=-3, correlation_id="corr-1", max_attempts=4)
    assert (job.created, job.state) == (True, "queued")
    assert (await app.enqueue("mail", job_id="a")).created is False
    later = await app.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="b",
                              delay=60, priority=9, correlation_id="corr-1", max_attempts=4)
    assert later.state == "scheduled"
    plain = await app.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="c",
                              correlation_id="corr-1", max_attempts=4)
    assert (plain.created, plain.state) == (True, "queued")
    _stored_as_asked(await app.get_job("a"), -3)
    _stored_as_asked(await app.get_job("b"), 9)
    _stored_as_asked(await app.get_job("c"), 0)
    stats = await app.stats("mail")
    assert (stats.ready, stats.scheduled) == (2, 1)


def _sync_enqueues(sync: SyncApp) -> None:
    job = sync.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="a",
                       queue="mail", priority=-3, correlation_id="corr-1", max_attempts=4)
    assert (job.created, job.state) == (True, "queued")
    assert sync.enqueue("mail", job_id="a", queue="mail").created is False
    later = sync.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="b",
                         queue="mail", delay=60, priority=9, correlation_id="corr-1",
                         max_attempts=4)
    assert later.state == "scheduled"
    plain = sync.enqueue("mail", {"to": "ü@example.com", "n": [1, 2]}, job_id="c",
                         queue="mail", correlation_id="corr-1", max_attempts=4)
    assert (plain.created, plain.state) == (True, "queued")
    _stored_as_asked(sync.get_job("a", queue="mail"), -3)
    _stored_as_asked(sync.get_job("b", queue="mail"), 9)
    _stored_as_asked(sync.get_job("c", queue="mail"), 0)
    stats = sync.stats("mail")
    assert (stats.ready, stats.scheduled) == (2, 1)


def _app(url: str, prefix: str, redis: Redis | None = None) -> App:
    app = App(url, prefix=prefix, redis=redis)

    @app.job(queue="mail")
    async def mail(to: str, n: list[int]) -> None: ...

    return app


@pytest.mark.anyio
async def test_the_async_producer_stores_a_packed_job_as_asked(
        redis_server: RedisProcess, prefix: str, packed_only: list[tuple[str, bytes]]) -> None:
    app = _app(redis_server.url, prefix)
    try:
        await _async_enqueues(app)
        assert [name for name, _ in packed_only] == CALLED
        lane: Any = app.scripts.lane
        assert direct._direct_io(lane._idle[-1])  # the path under test is the one taken
    finally:
        await app.close()


def test_the_sync_producer_stores_a_packed_job_as_asked(
        redis_server: RedisProcess, prefix: str, packed_only: list[tuple[str, bytes]]) -> None:
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        _sync_enqueues(sync)
        assert [name for name, _ in packed_only] == CALLED
        lane: Any = sync.scripts._lane
        assert sync_lane.direct_io(lane._idle[-1])


@pytest.mark.anyio
async def test_a_packed_call_loads_a_flushed_script(
        redis_server: RedisProcess, prefix: str, packed_only: list[tuple[str, bytes]]) -> None:
    app = _app(redis_server.url, prefix)
    sync = SyncApp(redis_server.url, prefix=prefix)
    try:
        for priority in (0, 1):  # enqueue_one.lua, then enqueue.lua
            await app.enqueue("mail", job_id=f"warm-a{priority}", priority=priority)
            sync.enqueue("mail", job_id=f"warm-s{priority}", queue="mail", priority=priority)
            flush = redis_sync.Redis.from_url(redis_server.url)
            flush.script_flush()
            assert (await app.enqueue("mail", job_id=f"after-a{priority}",
                                      priority=priority)).created
            flush.script_flush()
            assert sync.enqueue("mail", job_id=f"after-s{priority}", queue="mail",
                                priority=priority).created
            flush.close()
        assert [name for name, _ in packed_only] == ["enqueue_one"] * 4 + ["enqueue"] * 4
        assert (await app.stats("mail")).ready == 8
    finally:
        sync.close()
        await app.close()


@pytest.mark.anyio
async def test_a_packed_call_goes_through_redis_py_on_a_connection_it_parses(
        redis_server: RedisProcess, prefix: str, packed_only: list[tuple[str, bytes]]) -> None:
    """A connection without the hiredis parser (as a Sentinel one is driven
    by redis-py): the packed bytes are written by redis-py's
    send_packed_command and read by its parser."""
    client = Redis.from_url(redis_server.url, parser_class=_AsyncRESP2Parser)
    app = _app(redis_server.url, prefix, redis=client)
    try:
        await _async_enqueues(app)
        lane: Any = app.scripts.lane
        assert not direct._direct_io(lane._idle[-1])
    finally:
        await app.close()
    sync_client = redis_sync.Redis.from_url(redis_server.url, parser_class=_RESP2Parser)
    with SyncApp(redis_server.url, prefix=prefix + "-s", redis=sync_client) as sync:
        _sync_enqueues(sync)
        lane = sync.scripts._lane
        assert not sync_lane.direct_io(lane._idle[-1])
    assert [name for name, _ in packed_only] == CALLED * 2


@pytest.mark.anyio
async def test_changed_settings_reach_a_packed_call(redis_server: RedisProcess,
                                                    prefix: str) -> None:
    """The audit flag rides in the head: a head kept from before a change of
    settings must not be sent after it."""
    app = _app(redis_server.url, prefix)
    try:
        await app.enqueue("mail", job_id="quiet")
        app.scripts.settings = dataclasses.replace(app.scripts.settings, audit_all=True)
        await app.enqueue("mail", job_id="audited")
        client = redis_sync.Redis.from_url(redis_server.url)
        audit = client.xrange(app.keys("mail").events)
        client.close()
        ids = {fields[b"job"] for _, fields in audit}
        assert b"audited" in ids and b"quiet" not in ids
    finally:
        await app.close()


def test_the_module_names_the_tail_it_packs() -> None:
    # the tail's seven values are the run head's after (count, name), and the id
    assert scripts.ONE_JOB_TAIL == len(SPECS["enqueue"].run_head) - 2 + 1


def test_the_module_names_the_line_tail_and_the_inline_bound() -> None:
    # enqueue_one.lua's ARGV after (wake_cap, name) are the job's own
    assert scripts.LINE_TAIL == len(SPECS["enqueue_one"].argv) - 2
    text = (lua_dir() / "_lib.lua").read_text()
    bound = re.search(r"^local INLINE_MAX = (\d+)$", text, re.MULTILINE)
    assert bound is not None and int(bound[1]) == INLINE_MAX


@pytest.mark.anyio
async def test_a_lone_payload_at_the_inline_bound_stays_in_its_record_one_over_does_not(
        redis_server: RedisProcess, prefix: str) -> None:
    """A one-job call of INLINE_MAX bytes goes to enqueue_one.lua and keeps
    its payload in its record; one byte more goes to enqueue.lua, which puts
    it in the payloads hash. Both read back whole, on both producers."""
    app = _app(redis_server.url, prefix)
    try:
        qk = app.keys("mail")
        client = redis_sync.Redis.from_url(redis_server.url)
        with SyncApp(redis_server.url, prefix=prefix) as sync:
            for who, enqueue in (("a", app.scripts.enqueue), ("s", None)):
                for size in (INLINE_MAX, INLINE_MAX + 1):
                    payload = bytes([size % 251]) * size
                    job = NewJob(f"{who}{size}", "mail", payload, 0, 0, 0, 0, "")
                    if enqueue is not None:
                        assert await enqueue(qk, [job]) == [(True, "queued")]
                    else:
                        assert sync.scripts.enqueue(qk, [job]) == [(True, "queued")]
                    inline = split_record(client.hget(qk.jobs, job.id))[1]
                    kept = client.hget(qk.payloads, job.id)
                    assert (inline, kept) == ((payload, None) if size <= INLINE_MAX
                                              else (None, payload)), (who, size)
        assert client.lrange(qk.line, 0, -1) == [b"a1024", b"a1025", b"s1024", b"s1025"]
        client.close()
    finally:
        await app.close()


@pytest.mark.anyio
async def test_a_one_job_enqueue_keeps_the_wake_list_at_its_cap(
        redis_server: RedisProcess, prefix: str) -> None:
    """One token per job while the wake list is under wake_cap, none past
    it: through enqueue_one.lua (priority 0) and enqueue.lua (priority 1)."""
    app = _app(redis_server.url, prefix)
    try:
        app.scripts.settings = dataclasses.replace(app.scripts.settings, wake_cap=2)
        qk = app.keys("mail")
        for priority in (0, 1):
            await app.redis.delete(qk.wake)
            lengths = []
            for i in range(3):
                await app.enqueue("mail", job_id=f"{priority}-{i}", priority=priority)
                lengths.append(await app.redis.llen(qk.wake))
            assert lengths == [1, 2, 2], priority
    finally:
        await app.close()

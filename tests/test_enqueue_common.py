"""App.enqueue's common call (a job's name and a payload, nothing else; no
hook asking for enqueues) takes a short way on a queue already checked:
Producer.common makes its job at once, before App.enqueue gathers its
arguments for Producer.one. These tests hold that way to the long one's
answers: every option given beside a name leaves it, a queue's first call
still checks the shard count Redis records, and the payload, its absence
and the job's id come back as the long way stores them."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from leasequeue import App, Context, JobRequest, SyncApp, codec
from leasequeue.errors import ConfigError, PayloadNotSerializable, PayloadTooLarge, UnknownJob
from leasequeue.models import EnqueuedJob, JobRecord
from leasequeue.producer import (
    CACHED_NAMES,
    ENQUEUE_OPTIONS,
    NO_DELAY,
    NO_PRIORITY,
    EnqueueOptions,
    Producer,
    enqueue_options,
)
from leasequeue.registry import Defaults, Registry
from leasequeue.store.shards import Shards
from tests.harness.redis_proc import RedisProcess

pytestmark = pytest.mark.anyio


async def test_the_common_call_stores_what_the_long_way_stores(real_app: App) -> None:
    app = real_app
    first = await app.enqueue("j")  # the queue's first call: checked, the long way
    plain = await app.enqueue("j")  # the short way from here on
    given = await app.enqueue("j", {"n": 1, "s": "x"})
    for answer in (first, plain, given):
        assert answer == EnqueuedJob(answer.id, "default", "j", True, "queued")
        assert len(answer.id) == 28 and int(answer.id, 16) >= 0
    assert len({first.id, plain.id, given.id}) == 3
    assert (await app.get_job(plain.id)).payload == {}
    record = await app.get_job(given.id)
    assert (record.payload, record.state, record.priority) == ({"n": 1, "s": "x"}, "queued", 0)
    assert (record.max_attempts, record.correlation_id, record.request_id) == (None, given.id, "")
    # its typed error, nothing written: a payload that is not a dict
    with pytest.raises(PayloadNotSerializable):
        await app.enqueue("j", ["not", "a", "dict"])  # type: ignore[arg-type]
    assert (await app.stats("default")).ready == 3


def stored(record: JobRecord, *differs: str) -> dict[str, Any]:
    """A job's record as stored, but for its own id and instants and the
    fields named (those the call gave)."""
    fields = dataclasses.asdict(record)
    for name in ("id", "correlation_id", "enqueued_ms", "ready_ms", "due_ms", *differs):
        fields.pop(name)
    return fields


async def test_every_option_beside_the_name_takes_the_long_way(real_app: App) -> None:
    """Each option given alone, on a queue the common call has checked
    already: the job is what the option asks for, and in every other
    field what the common call stores (an option left out is its
    default on the long way too)."""
    app = real_app
    common = await app.get_job((await app.enqueue("j")).id)  # the queue checked too

    async def alike(answer: EnqueuedJob, *differs: str) -> JobRecord:
        record = await app.get_job(answer.id, queue=answer.queue)
        assert stored(record, *differs) == stored(common, *differs)
        return record

    mine = await app.enqueue("j", job_id="mine")
    assert mine == EnqueuedJob("mine", "default", "j", True, "queued")
    await alike(mine)
    assert await app.enqueue("j", job_id="mine") == mine._replace(created=False)
    delayed = await app.enqueue("j", delay=60)
    assert delayed.state == "scheduled"
    await alike(delayed, "state")
    high = await app.enqueue("j", priority=5)
    assert (await alike(high, "priority")).priority == 5
    elsewhere = await app.enqueue("j", queue="other")
    assert elsewhere.queue == "other"
    assert (await alike(elsewhere, "queue")).queue == "other"
    correlated = await app.enqueue("j", correlation_id="c1")
    assert (await alike(correlated)).correlation_id == "c1"
    requested = await app.enqueue("j", request_id="r1")
    assert (await alike(requested, "request_id")).request_id == "r1"
    attempts = await app.enqueue("j", max_attempts=3)
    assert (await alike(attempts, "max_attempts")).max_attempts == 3
    infra = await app.enqueue("j", max_infra_attempts=4)
    assert (await alike(infra, "max_infra_attempts")).max_infra_attempts == 4


def test_an_option_left_out_is_its_default_the_very_default_objects() -> None:
    """enqueue_options fills every option left out with its default, the
    delay and the priority with the very NO_DELAY and NO_PRIORITY objects
    (Producer.one takes the cached default shape only for those), and
    EnqueueOptions' fields are JobRequest's, with their types."""
    values = enqueue_options({})
    assert values == (None, None, NO_DELAY, NO_PRIORITY, None, None, None, None)
    assert values[2] is NO_DELAY and values[3] is NO_PRIORITY
    assert typing.get_type_hints(EnqueueOptions) == {
        name: hint for name, hint in typing.get_type_hints(JobRequest).items()
        if name not in ("name", "payload")}


async def test_an_unknown_option_is_refused_by_name_and_writes_nothing(
        real_app: App, redis_server: RedisProcess, prefix: str) -> None:
    """An option that enqueue does not take (a typo of one it does) raises
    TypeError naming it, from App (when the call is awaited) and SyncApp,
    alone or beside known ones, and writes nothing
    (producer.EnqueueOptions)."""
    app = real_app
    await app.enqueue("j")  # the queue checked: a call with no option goes the short way
    before = await app.redis.dbsize()
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\): dealy \("):
        await app.enqueue("j", dealy=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"argument\(s\): dealy, prio \("):
        await app.enqueue("j", job_id="k", prio=1, dealy=5)  # type: ignore[call-arg]
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        with pytest.raises(TypeError, match=r"argument\(s\): dealy \("):
            sync.enqueue("j", job_id="k", dealy=5)  # type: ignore[call-arg]
    assert await app.redis.dbsize() == before


async def test_every_option_given_at_its_default_makes_the_common_call_s_job(
        real_app: App, redis_server: RedisProcess, prefix: str) -> None:
    """Every option given, each at its default value (the delay a float of
    the caller's, not NO_DELAY): the long way stores the job the common
    call stores, from App and SyncApp; and EnqueueOptions takes
    JobRequest's fields, no fewer and no more, so that enqueue and
    enqueue_many take the same options."""
    app = real_app
    defaults: EnqueueOptions = {
        "job_id": None, "queue": None, "delay": 0.0, "priority": 0, "correlation_id": None,
        "request_id": None, "max_attempts": None, "max_infra_attempts": None}
    assert set(defaults) == ENQUEUE_OPTIONS == {
        f.name for f in dataclasses.fields(JobRequest)} - {"name", "payload"}
    common = await app.enqueue("j", {"n": 1})
    given = await app.enqueue("j", {"n": 1}, **defaults)
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        synced = sync.enqueue("j", {"n": 1}, **defaults)
    expected = stored(await app.get_job(common.id))
    assert expected["payload"] == {"n": 1} and expected["max_attempts"] is None
    for answer in (given, synced):
        assert answer == common._replace(id=answer.id)
        assert stored(await app.get_job(answer.id)) == expected


async def test_a_queue_s_first_common_call_checks_its_recorded_shard_count(
        redis_server: RedisProcess, prefix: str) -> None:
    """A queue recorded in Redis with 3 shards: an App that holds it unsharded
    refuses its common call, the first and every later one, and writes
    nothing (its jobs would go to keys no worker of the sharded queue reads)."""
    async with App(redis_server.url, prefix=prefix, queue_shards={"default": 3}) as sharded:
        await sharded.enqueue("j", job_id="a")
    async with App(redis_server.url, prefix=prefix) as plain:
        before = await plain.redis.dbsize()
        for _ in range(2):
            with pytest.raises(ConfigError, match="recorded in Redis with 3 shard"):
                await plain.enqueue("j")
        with pytest.raises(ConfigError):
            await plain.enqueue_many([JobRequest("j")])
        assert await plain.redis.dbsize() == before


async def test_an_unknown_name_is_refused_on_a_checked_queue(real_app: App) -> None:
    """An App with handlers refuses a name it does not know, on a queue its
    common calls have checked already, and writes nothing."""
    app = real_app

    @app.job
    async def j(ctx: Context) -> None: ...

    await app.enqueue("j")
    await app.enqueue("j")
    before = await app.redis.dbsize()
    with pytest.raises(UnknownJob):
        await app.enqueue("nobody")
    assert await app.redis.dbsize() == before
    assert (await app.stats("default")).ready == 2


async def test_a_registration_after_the_first_calls_moves_the_commonest_call_s_jobs(
        real_app: App) -> None:
    """App.enqueue reads the commonest call's job (no payload) from the
    producer's cache itself (Producer.empty_jobs): a registration that
    moves the name to another queue, after calls that cached its job,
    takes its next calls there, not to the queue of the cached job."""
    app = real_app
    before = [await app.enqueue("j") for _ in range(3)]  # cached, its queue checked
    assert {answer.queue for answer in before} == {"default"}
    app.job(_handler, name="j", queue="elsewhere")
    moved = [await app.enqueue("j") for _ in range(2)]
    assert [answer.queue for answer in moved] == ["elsewhere", "elsewhere"]
    assert [(await app.get_job(a.id)).queue for a in moved] == ["elsewhere", "elsewhere"]
    assert ((await app.stats("default")).ready, (await app.stats("elsewhere")).ready) == (3, 2)


class _Name(str):
    pass


async def test_a_name_or_queue_that_is_not_a_str_gets_its_typed_error_and_writes_nothing(
        real_app: App, redis_server: RedisProcess, prefix: str) -> None:
    """A job name or a queue name that is not a str, one that cannot be
    hashed (a list) among them, raises ConfigError naming it, from every
    enqueue call of App and SyncApp, after calls that cached the name's job
    too, and writes nothing (a list raised TypeError from a cache's lookup
    before 2026-12-08). A str subclass of a good name is a good name: its
    call takes the long way and stores the job as the common call does."""
    app = real_app
    await app.enqueue("j")
    await app.enqueue("j")  # the commonest call's job cached, its queue checked
    before = await app.redis.dbsize()
    bad_names: list[Any] = [["j"], {"j"}, 5, None]
    for bad in bad_names:
        with pytest.raises(ConfigError, match="invalid job name"):
            await app.enqueue(bad)
        with pytest.raises(ConfigError, match="invalid job name"):
            await app.enqueue(bad, {"n": 1})
        with pytest.raises(ConfigError, match="invalid job name"):
            await app.enqueue(bad, job_id="a")
        with pytest.raises(ConfigError, match="invalid job name"):
            await app.enqueue_many([JobRequest(bad)])
    for bad in (["q"], {"q"}):
        with pytest.raises(ConfigError, match="invalid queue name"):
            await app.enqueue("j", queue=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="invalid queue name"):
            await app.enqueue_many([JobRequest("j", queue=bad)])  # type: ignore[arg-type]
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        sync.enqueue("j")
        after_sync = await app.redis.dbsize()
        for bad in bad_names:
            with pytest.raises(ConfigError, match="invalid job name"):
                sync.enqueue(bad)
            with pytest.raises(ConfigError, match="invalid job name"):
                sync.enqueue_many([JobRequest(bad)])
        with pytest.raises(ConfigError, match="invalid queue name"):
            sync.enqueue("j", queue=["q"])  # type: ignore[arg-type]
    assert await app.redis.dbsize() == after_sync
    assert after_sync >= before and (await app.stats("default")).ready == 3
    subclassed = await app.enqueue(_Name("j"))
    assert (subclassed.queue, subclassed.name, subclassed.created) == ("default", "j", True)
    assert stored(await app.get_job(subclassed.id)) == stored(
        await app.get_job((await app.enqueue("j")).id))


async def test_no_payload_under_a_limit_below_one_byte_is_refused_as_before() -> None:
    """Producer.common stores no payload as codec.EMPTY_ENVELOPE, the bytes
    encode_envelope gives it under any limit of a byte or more; under a
    limit below that (App refuses one, SyncApp takes it) it raises what
    encode_envelope raises, as the long way did."""
    for limit in (1, 4, 5, 1 << 20):
        common = Producer(Registry(Defaults()), Shards("p", {}), limit).common("j", None, True)
        assert common is not None and common[2].payload == codec.EMPTY_ENVELOPE
        assert common[2].payload == codec.encode_envelope(None, "", "", limit)
    with pytest.raises(PayloadTooLarge):
        Producer(Registry(Defaults()), Shards("p", {}), 0).common("j", None, True)


async def _handler(ctx: Context) -> None: ...


def test_the_commonest_call_s_job_is_made_once_a_name_and_dropped_with_its_route() -> None:
    """No payload and the id drawn at the send (App.enqueue's common call with
    no payload): Producer.common answers one job made once a name, with no
    id and the empty envelope. A call with a payload, or one whose job needs
    its id now, gets a job of its own; a registration that moves the name,
    and shards set for its queue, drop the cached job."""
    registry = Registry(Defaults())
    producer = Producer(registry, Shards("p", {}), 1 << 20)
    first = producer.common("j", None, True)
    assert first is not None and producer.common("j", None, True) is first
    logical_queue, keys, job = first
    assert (logical_queue, job.id, job.name, job.payload) == ("default", "", "j",
                                                                 codec.EMPTY_ENVELOPE)
    given = producer.common("j", {"n": 1}, True)
    assert given is not None and given[2].payload != codec.EMPTY_ENVELOPE
    assert given[2].payload == codec.encode_envelope({"n": 1}, "", "", 1 << 20)
    own = producer.common("j", None, False)
    assert own is not None and len(own[2].id) == 28 and own[2].payload == codec.EMPTY_ENVELOPE
    registry.register(_handler, name="j", queue="elsewhere")
    moved = producer.common("j", None, True)
    assert moved is not None and moved[0] == "elsewhere" and moved[1] != keys
    assert producer.common("j", None, True) is moved
    producer.shards = Shards("p", {"elsewhere": 3})  # its jobs need a shard: the long way
    assert producer.common("j", None, True) is None


def test_a_name_that_is_not_a_str_never_gets_the_cached_job() -> None:
    """A str subclass equal to a cached name, and a name that cannot be
    hashed, take the long way (Producer.one decides, as for any call): no
    cached job, no TypeError from the cache."""

    class Name(str):
        pass

    producer = Producer(Registry(Defaults()), Shards("p", {}), 1 << 20)
    assert producer.common("j", None, True) is not None
    assert producer.common(Name("j"), None, True) is None
    assert producer.common(["j"], None, True) is None  # type: ignore[arg-type]


def test_ever_new_names_keep_each_cache_by_name_within_its_bound() -> None:
    """A producer fed ever new job names (a name made from a user's input):
    each of its caches by name (the checked names, the shapes, the common
    call's entries and the commonest call's jobs) holds at most
    CACHED_NAMES entries, and every call is still answered right; a name
    cached before the bound was reached is made again, the same."""
    producer = Producer(Registry(Defaults()), Shards("p", {}), 1 << 20)
    extra = 10
    for i in range(CACHED_NAMES + extra):
        empty = producer.common(f"n{i}", None, True)
        assert empty is not None and empty[2].name == f"n{i}"
        given = producer.common(f"n{i}", {"i": i}, True)
        assert given is not None and given[0] == "default"
        queue, _, job = producer.one(f"n{i}", None, None, "other", NO_DELAY, NO_PRIORITY,
                                     None, None, None, None, None)
        assert (queue, job.name) == ("other", f"n{i}")
    caches = {"names checked": producer._names_ok, "shapes": producer._shapes[1],
              "common entries": producer._plains[1], "commonest jobs": producer.empty_jobs[1]}
    for cache, entries in caches.items():
        assert 0 < len(entries) <= CACHED_NAMES, (cache, len(entries))
    last = f"n{CACHED_NAMES + extra - 1}"  # the newest name kept, under the current version
    assert {last, "n0"} & set(producer._plains[1]) == {last}
    assert last in producer.empty_jobs[1] and last in producer._shapes[1]
    assert producer._shapes[0] == producer._plains[0] == producer.empty_jobs[0] == (
        producer.registry.version)
    again = producer.common("n0", None, True)  # dropped with the rest: made again
    assert again is not None and (again[0], again[2].name, again[2].id) == ("default", "n0", "")

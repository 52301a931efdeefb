"""One enqueue call's job, made without a JobRequest (Producer.one): a call
that leaves delay, priority and the budgets at their defaults takes its
checked shape from a cache per (name, queue). It must make exactly the job
and raise exactly the error that prepare() of the same request does, and
drop what it cached when that can go stale. Job ids are never handed out
twice: not across threads, not across a fork (an id pool drawn ahead was
tried and taken back, DESIGN-NOTES.md: these tests hold any later
one to it)."""

from __future__ import annotations

import enum
import threading
from typing import Any

import pytest

import leasequeue as lq
from leasequeue import producer as producer_module
from leasequeue.errors import ConfigError, LimitKeyError, UnknownJob
from leasequeue.producer import NO_DELAY, NO_PRIORITY, JobRequest, new_job_id
from leasequeue.rate import Rate
from leasequeue.store.shards import Shards
from leasequeue.sync import SyncApp
from tests.harness.redis_proc import RedisProcess
from tests.helpers import in_forked_child

Q = "default"


class Level(enum.IntEnum):
    HIGH = 5


def _one(producer: producer_module.Producer, r: JobRequest) -> Any:
    """Producer.one's (queue, job), checked to come with the keys that
    keys_for gives that job: the keys its plain entry holds are those."""
    queue, keys, job = producer.one(r.name, r.payload, r.job_id, r.queue, r.delay, r.priority,
                                    r.correlation_id, r.request_id, r.max_attempts,
                                    r.max_infra_attempts, None)
    assert keys == producer.keys_for(queue, job.id)
    return queue, job


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:  # the very error, typed, with its message
        return (type(exc), str(exc))


def test_one_makes_the_job_and_the_error_prepare_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Producer.one of a call's arguments against prepare() of the same
    JobRequest: the same (queue, NewJob) field for field (a fixed id for
    the ids each makes), or the same typed error with the same message.
    The cases cover the default objects (the cached shape, first and
    second time), values equal to a default but not it (0 as delay,
    False as priority: shape()'s checks, not the cache, decide), every
    field away from its default, and bad names and queues."""
    monkeypatch.setattr(producer_module, "new_job_id", lambda: "fixed-id")
    app = lq.App("memory://one-made")

    @app.job(max_concurrent=2, concurrency_key="order:{order_id}")
    async def keyed(order_id: int) -> None: ...

    @app.job()
    async def plain() -> None: ...

    producer = app.producer
    other_delay = float("0.0")  # equal to NO_DELAY, another object
    assert other_delay is not NO_DELAY and other_delay == NO_DELAY
    cases = [
        JobRequest("plain"), JobRequest("plain"),  # the cache's miss, then its hit
        JobRequest("plain", {"k": 1}), JobRequest("plain", None, "given-id"),
        JobRequest("plain", queue="elsewhere"), JobRequest("plain", queue="elsewhere"),
        JobRequest("plain", delay=2.5), JobRequest("plain", delay=0),
        JobRequest("plain", delay=other_delay), JobRequest("plain", priority=7),
        JobRequest("plain", priority=Level.HIGH), JobRequest("plain", priority=False),
        JobRequest("plain", priority=True), JobRequest("plain", priority=40_000),
        JobRequest("plain", delay=-1.0), JobRequest("plain", delay="soon"),  # type: ignore[arg-type]
        JobRequest("plain", max_attempts=3), JobRequest("plain", max_infra_attempts=4),
        JobRequest("plain", max_attempts=0), JobRequest("plain", max_attempts=True),
        JobRequest("plain", None, None, None, NO_DELAY, NO_PRIORITY, "corr", "req"),
        JobRequest("plain", None, "same", correlation_id="same"),
        JobRequest("plain", None, ""), JobRequest("plain", None, "x" * 513),
        JobRequest("keyed", {"order_id": 9}), JobRequest("keyed", {"order_id": 9}),
        JobRequest("keyed", {}), JobRequest("keyed", {"order_id": 9}, queue="elsewhere"),
        JobRequest("nobody"), JobRequest("nobody"), JobRequest("nobody", queue="theirs"),
        JobRequest("bad name!"), JobRequest("plain", queue="bad queue!"),
        JobRequest(5),  # type: ignore[arg-type]
        JobRequest("plain", queue=7),  # type: ignore[arg-type]
        JobRequest("plain", {"k": object()}),
    ]
    assert cases[0].delay is NO_DELAY and cases[0].priority is NO_PRIORITY
    for r in cases:
        made = _outcome(_one, producer, r)
        expected = _outcome(producer.prepare, r)
        assert made == expected, r
    # and the errors themselves (the two share make(), so a check lost there
    # would pass the comparison above)
    for bad in (JobRequest("plain", priority=True), JobRequest("plain", None, ""),
                JobRequest("plain", None, "x" * 513), JobRequest("plain", None, 7)):  # type: ignore[arg-type]
        assert _outcome(_one, producer, bad)[0] is ConfigError, bad
    assert _one(producer, JobRequest("plain"))[1].priority.__class__ is int
    cached = producer._shapes[1]  # the default calls went through the cache
    assert {"plain", "keyed", ("plain", "elsewhere")} <= set(cached)
    assert not {"nobody", "bad name!", 5} & set(cached)  # errors are never cached


def test_default_shapes_are_dropped_when_the_registry_gains_a_job() -> None:
    """What default_shape cached of a name's route goes stale when the
    registry gains a job (a producer-only App's names all went to its
    default queue; a name routed by queue= may now have limit keys) or
    queue_rates is set (every job then has a queue's rate key to render):
    the next call must see the change."""
    app = lq.App("memory://one-stale")
    producer = app.producer

    def one(name: str, payload: dict[str, Any] | None = None,
            queue: str | None = None) -> Any:
        queue, _keys, job = producer.one(name, payload, None, queue, NO_DELAY, NO_PRIORITY,
                                         None, None, None, None, None)
        return queue, job

    assert one("anything")[0] == Q  # producer-only: the default queue
    assert one("later", queue="theirs")[1].grp == ""

    @app.job(queue="theirs", max_concurrent=1, concurrency_key="order:{order_id}")
    async def later(order_id: int) -> None: ...

    with pytest.raises(UnknownJob):
        one("anything")  # an App with handlers does not know it
    with pytest.raises(LimitKeyError):
        one("later", {}, queue="theirs")  # its concurrency key now renders from the payload
    assert one("later", {"order_id": 1}, queue="theirs")[0] == "theirs"

    @app.job()
    async def steady() -> None: ...

    assert one("steady", {"tenant": "a"})[1].grp == ""
    producer.queue_rates = {Q: Rate(10, per=1.0, key="tenant:{tenant}")}  # as App() does
    with pytest.raises(LimitKeyError):
        one("steady")  # the queue's rate key renders from every payload
    assert one("steady", {"tenant": "a"})[1].grp != ""  # parked by its tenant's key


def test_a_shard_s_cached_shape_is_dropped_when_the_shards_change() -> None:
    """A shape cached for a shard named outright (queue="hot#3") holds that
    shard exists; the dashboard routes by the counts recorded in Redis and
    sets the producer's shards when they differ: the next call must be
    checked against the new counts (ConfigError, nothing cached kept)."""
    app = lq.App("memory://one-shards", queue_shards={"hot": 4})
    producer = app.producer

    def one(queue: str) -> Any:
        logical_queue, _keys, job = producer.one("x", None, None, queue, NO_DELAY, NO_PRIORITY,
                                                 None, None, None, None, None)
        return logical_queue, job

    assert one("hot#3")[0] == "hot#3"
    producer.shards = Shards(app.prefix, {"hot": 2})
    with pytest.raises(ConfigError, match="not a shard"):
        one("hot#3")
    assert one("hot#1")[0] == "hot#1"


def test_the_common_call_goes_to_its_job_s_shard() -> None:
    """A name's common call (a name and a payload, nothing else) takes its
    keys from one cached entry only where they cannot depend on the job:
    a sharded queue's jobs spread over its shards by their ids, the first
    call and the cached ones alike, and a queue that becomes sharded (the
    dashboard sets the counts recorded in Redis) drops the entry."""
    app = lq.App("memory://one-plain-shards", queue_shards={"hot": 4})

    @app.job(queue="hot")
    async def spread() -> None: ...

    @app.job()
    async def steady() -> None: ...

    producer = app.producer

    def common(name: str) -> tuple[str, str]:
        queue, keys, job = producer.one(name, None, None, None, NO_DELAY, NO_PRIORITY, None,
                                        None, None, None, None)
        assert keys == producer.keys_for(queue, job.id)
        return queue, keys.queue

    assert {common("spread") for _ in range(64)} == {("hot", f"hot#{k}") for k in range(4)}
    assert {common("steady") for _ in range(8)} == {(Q, Q)}  # not sharded: its entry
    producer.shards = Shards(app.prefix, {"hot": 4, Q: 2})
    assert {common("steady") for _ in range(64)} == {(Q, f"{Q}#{k}") for k in range(2)}


def test_job_ids_from_many_threads_are_all_distinct() -> None:
    """8 threads drawing 5,000 ids each at once get 40,000 ids, each 28 hex
    characters, no two alike."""
    drawn: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def draw(mine: list[str]) -> None:
        start.wait()
        mine.extend(new_job_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(mine,)) for mine in drawn]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for mine in drawn for i in mine]
    assert len(ids) == 40_000 and len(set(ids)) == 40_000
    assert all(len(i) == 28 and int(i, 16) >= 0 for i in ids)


def test_a_forked_child_never_hands_out_its_parent_s_ids(redis_server: RedisProcess,
                                                        prefix: str) -> None:
    """A forked child and its parent each enqueue 200 jobs after the parent's
    first, and every one of the 401 is created and queued: no id of the
    child's is one its parent hands out after the fork (ids drawn ahead and
    kept across the fork would be answered 'existed': 200 jobs lost)."""
    with SyncApp(redis_server.url, prefix=prefix) as sync:
        assert sync.enqueue("j").created
        report = in_forked_child(lambda: str(sum(sync.enqueue("j").created
                                                  for _ in range(200))))
        assert report == "200"
        assert sum(sync.enqueue("j").created for _ in range(200)) == 200
        assert sync.stats().ready == 401


def test_keys_for_is_the_keys_of_the_job_s_route() -> None:
    """Shards.keys_for (each App.enqueue's keys) answers keys(route()) for a
    queue not sharded and for a sharded one, also once the sharded queue's
    own name has keys known (keys("hot"), as a caller naming the logical
    queue makes): a job of a sharded queue always goes to its shard."""
    shards = Shards("p", {"hot": 4})
    shards.keys("hot")  # known keys under the sharded queue's own name
    ids = [f"id-{i}" for i in range(64)]
    for queue in ("plain", "hot", "hot#3"):
        for _ in range(2):  # the second time, from the keys known by then
            for job_id in ids:
                assert shards.keys_for(queue, job_id) == shards.keys(shards.route(queue, job_id))
    assert {shards.keys_for("hot", i).queue for i in ids} == {f"hot#{k}" for k in range(4)}
    for bad in ("hot#4", "plain#1"):
        with pytest.raises(ConfigError, match="not a shard"):
            shards.keys_for(bad, "id-0")

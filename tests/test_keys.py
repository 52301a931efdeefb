"""The key layout: one hash slot per queue (so every script runs on Redis
Cluster), the limiter in a slot of its own, and names that would break the
layout refused before anything is written."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from redis.crc import key_slot

from leasequeue import App
from leasequeue.errors import ConfigError
from leasequeue.store.keys import QueueKeys, limit_keys, limiter_key, queue_keys

BAD_NAMES = ["a b", "x{y}", "a:b", "", "q" * 101, "x}", "tab\t", "é"]


def slot(key: str) -> int:
    return key_slot(key.encode())


@pytest.mark.parametrize("prefix, queue", [
    ("lq", "default"), ("lq", "emails.high-prio_2"), ("svc:prod", "q"), ("p", "q" * 100),
])
def test_every_key_of_a_queue_shares_one_slot(prefix: str, queue: str) -> None:
    qk = queue_keys(prefix, queue)
    keys = qk.all()
    # all() must list every key property, or the slot check below misses one
    props = {n for n, v in vars(QueueKeys).items() if isinstance(v, property) and n != "tag"}
    assert len(keys) == len(set(keys)) == len(props)
    assert set(keys) == {getattr(qk, n) for n in props}
    assert {slot(k) for k in keys} == {slot(qk.tag)}
    assert all(k.startswith(qk.tag + ":") for k in keys)


def test_different_queues_may_land_in_different_slots() -> None:
    slots = {slot(queue_keys("lq", f"q{i}").ready) for i in range(20)}
    assert len(slots) > 1  # one tag per queue, not one tag for the whole prefix


def test_limiter_key_is_one_slot_of_its_own() -> None:
    key = limiter_key("lq:limiter", "smtp")
    # the whole key is its own hash tag: one slot, apart from any queue's tag
    assert key.startswith("{") and key.endswith("}") and key.count("{") == 1
    assert slot(key) == key_slot(key[1:-1].encode())
    assert key != queue_keys("lq", "smtp").tag
    # services configured with the same limiter prefix share the limit
    assert limiter_key("shared", "smtp") == limiter_key("shared", "smtp") == "{shared:smtp}"
    # limit names follow job names: ':' allowed ("job.billing:sync"), up to 200
    for bad in [*(b for b in BAD_NAMES if b not in ("a:b", "q" * 101)), "q" * 201]:
        with pytest.raises(ConfigError):
            limiter_key("lq:limiter", bad)
    assert limiter_key("lq:limiter", "job.billing:sync") == "{lq:limiter:job.billing:sync}"
    # a limit's keys (holders, evicted, waiters of a keyed limit) share its slot
    lk = limit_keys("lq:limiter", "key.order:1")
    assert {slot(k) for k in (lk.limit, lk.evicted, lk.waiters)} == {slot(lk.limit)}
    assert lk.waiters == "{lq:limiter:key.order:1}:waiters"


@pytest.mark.parametrize("bad", BAD_NAMES)
def test_queue_keys_refuses_bad_queue_names(bad: str) -> None:
    with pytest.raises(ConfigError):
        queue_keys("lq", bad)


@pytest.mark.parametrize("check", [
    lambda: queue_keys("lq", "default\n"),
    lambda: queue_keys("lq\n", "default"),
    lambda: limiter_key("lq:limiter", "smtp\n"),
], ids=["queue", "prefix", "limiter"])
def test_trailing_newline_is_refused(check: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        check()


def test_longest_queue_name_is_accepted() -> None:
    assert queue_keys("lq", "q" * 100).queue == "q" * 100


@pytest.mark.anyio
@pytest.mark.parametrize("bad", BAD_NAMES)
async def test_enqueue_refuses_bad_queue_names(app: App, bad: str) -> None:
    with pytest.raises(ConfigError):
        await app.enqueue("j", {"x": 1}, queue=bad)
    assert [k async for k in app.redis.scan_iter(match="{" + app.prefix + ":*")] == []

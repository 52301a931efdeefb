"""The resource ledger: ctx.resource records and clears an entry; a key an
old, dead run holds is closed before it is opened again (sweep); a live
holder is never swept; the boot cleanup and the TTL janitor close only
orphans; racing closers close once in effect, and a close may run twice
(a closer whose claim lapsed) and concurrently."""

from __future__ import annotations

import anyio
import pytest

from leasequeue import App, ConfigError, Context, JobRequest, ResourceBusy
from leasequeue.resources import Entry, RunResources
from leasequeue.store.keys import resource_keys
from leasequeue.store.specs import ResourceClaimReply
from tests.helpers import START_ALL, eventually, new_claim_id, server_ms, worker_running

pytestmark = pytest.mark.anyio


class Closes:
    """A close function that counts calls and effects: the resource is a
    name in `open`; closing removes it (an effect) or finds it gone."""

    def __init__(self) -> None:
        self.open: set[str] = set()
        self.calls: list[str] = []
        self.effects: list[str] = []
        self.gate: anyio.Event | None = None  # when set, the first close waits for it

    async def __call__(self, key: str) -> None:
        self.calls.append(key)
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        if key in self.open:
            self.open.discard(key)
            self.effects.append(key)


def kit(app: App, ttl: float = 3600) -> Closes:
    closes = Closes()
    app.resource_kind("tmpdir", close=closes, ttl=ttl)
    return closes


async def live_runs(app: App, n: int) -> list[tuple[str, str, int]]:
    """n jobs claimed and started: their runs are live owners."""
    await app.enqueue_many([JobRequest("j", job_id=f"live{i}")
                            for i in range(n)])
    batch = await app.scripts.claim(app.keys("default"), n, 30_000, "w", START_ALL,
                                    new_claim_id())
    return [("default", job.id, job.token) for job in batch.jobs]


async def entry_of(app: App, key: str, worker: str = "w") -> Entry | None:
    return await app.ledger._entry(resource_keys(app.prefix, "tmpdir", key, worker))


async def seed(app: App, key: str, owner: tuple[str, str, int], worker: str = "old",
               life: str = "l0", ttl_ms: int = 3_600_000) -> Entry:
    rk = resource_keys(app.prefix, "tmpdir", key, worker)
    await app.scripts.resource_open(rk, owner, worker, life, ttl_ms)
    entry = await entry_of(app, key, worker)
    assert entry is not None
    return entry


async def test_a_run_records_its_resource_and_clears_it_when_it_closes(app: App) -> None:
    closes = kit(app)
    seen: list[Entry | None] = []

    @app.job
    async def work(ctx: Context) -> None:
        async with ctx.resource("tmpdir", "/tmp/a", open=lambda k: closes.open.add(k)) as v:
            assert v is None  # open's return value
            seen.append(await entry_of(app, "/tmp/a", ctx.worker_id))

    await app.enqueue("work", job_id="r1")
    async with worker_running(app, worker_id="w1"):
        await eventually(lambda: closes.calls, what="the close")
    (entry,) = seen
    assert entry is not None
    assert (entry.kind, entry.key, entry.owner[:2], entry.worker) == (
        "tmpdir", "/tmp/a", ("default", "r1"), "w1")
    assert closes.calls == closes.effects == ["/tmp/a"]
    assert await entry_of(app, "/tmp/a", "w1") is None
    rk = resource_keys(app.prefix, "tmpdir", "/tmp/a", "w1")
    assert await app.redis.zcard(rk.expiry) == 0 and await app.redis.scard(rk.worker) == 0


async def test_opening_a_key_a_dead_run_holds_closes_the_old_one_first(app: App) -> None:
    closes = kit(app)
    closes.open.add("/tmp/k")
    await seed(app, "/tmp/k", ("default", "gone", 7))  # no such job: not live
    (owner,) = await live_runs(app, 1)
    order: list[str] = []
    res = RunResources(app.ledger, owner, "w", "l1")
    async with res.open("tmpdir", "/tmp/k", open=lambda k: order.append(f"open {k}")):
        order.insert(0, "closed before" if closes.effects == ["/tmp/k"] else "not closed")
        entry = await entry_of(app, "/tmp/k")
        assert entry is not None and entry.owner == owner
    assert order == ["closed before", "open /tmp/k"]
    assert closes.calls == ["/tmp/k", "/tmp/k"]  # the sweep, then the run's own close


async def test_a_key_held_by_a_live_run_is_never_swept(app: App) -> None:
    closes = kit(app)
    a, b = await live_runs(app, 2)
    async with RunResources(app.ledger, a, "w", "l").open("tmpdir", "/tmp/k"):
        with pytest.raises(ResourceBusy):
            async with RunResources(app.ledger, b, "w", "l").open("tmpdir", "/tmp/k"):
                pass
        assert closes.calls == []
        entry = await entry_of(app, "/tmp/k")
        assert entry is not None and entry.owner == a
    assert closes.calls == ["/tmp/k"]


async def test_a_resource_opened_twice_by_racing_runs_is_closed_exactly_once_in_effect(
        app: App) -> None:
    closes = kit(app)
    runs = await live_runs(app, 4)
    entered: list[tuple[str, str, int]] = []
    busy: list[tuple[str, str, int]] = []
    release = anyio.Event()

    async def race(owner: tuple[str, str, int]) -> None:
        try:
            async with RunResources(app.ledger, owner, "w", "l").open(
                    "tmpdir", "/tmp/race", open=lambda k: closes.open.add(k)):
                entered.append(owner)
                await release.wait()
        except ResourceBusy:
            busy.append(owner)

    async with anyio.create_task_group() as tg:
        for owner in runs:
            tg.start_soon(race, owner)
        await eventually(lambda: len(entered) + len(busy) == len(runs), what="every racer")
        release.set()
    assert len(entered) == 1 and len(busy) == 3
    assert closes.effects == ["/tmp/race"] and closes.calls == ["/tmp/race"]
    assert await entry_of(app, "/tmp/race") is None


async def test_racing_reconcilers_close_once_and_a_lapsed_closer_lets_another_close_again(
        app: App) -> None:
    closes = kit(app)
    closes.open.add("/tmp/o")
    entry = await seed(app, "/tmp/o", ("default", "gone", 1))
    results: list[bool] = []

    async def reconcile(i: int) -> None:
        results.append(await app.ledger.reconcile(entry, f"closer{i}"))

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(reconcile, i)
    assert sorted(results) == [False] * 4 + [True]
    assert closes.calls == ["/tmp/o"] == closes.effects
    assert await entry_of(app, "/tmp/o", "old") is None

    # a closer that stalls past its claim: the next closer closes too, at the
    # same time (documented: close functions may run twice, concurrently)
    closes.open.add("/tmp/p")
    entry = await seed(app, "/tmp/p", ("default", "gone", 2))
    closes.gate = anyio.Event()
    stalled = closes.gate
    async with anyio.create_task_group() as tg:
        tg.start_soon(reconcile, 10)
        await eventually(lambda: "/tmp/p" in closes.calls, what="the first close")
        assert not await app.ledger.reconcile(entry, "closer11")  # claimed: busy
        rk = resource_keys(app.prefix, "tmpdir", "/tmp/p", "old")
        await app.redis.hset(rk.entry, "closing_until", await server_ms(app) - 1)
        assert await app.ledger.reconcile(entry, "closer12")  # the claim lapsed
        stalled.set()
    assert closes.calls.count("/tmp/p") == 2 and closes.effects.count("/tmp/p") == 1
    assert await entry_of(app, "/tmp/p", "old") is None


async def test_boot_cleanup_closes_only_the_earlier_life_of_this_worker_id(app: App) -> None:
    closes = kit(app)
    await seed(app, "/tmp/old-life", ("default", "x1", 1), worker="w1", life="before")
    await seed(app, "/tmp/this-life", ("default", "x2", 1), worker="w1", life="now")
    await seed(app, "/tmp/other-worker", ("default", "x3", 1), worker="w2", life="before")
    assert await app.ledger.boot_cleanup("w1", "now") == 1
    assert closes.calls == ["/tmp/old-life"]
    assert await entry_of(app, "/tmp/this-life", "w1") is not None
    assert await entry_of(app, "/tmp/other-worker", "w2") is not None
    assert await app.ledger.boot_cleanup("w1", "now") == 0  # idempotent


async def test_the_janitor_closes_only_orphans_past_their_ttl(app: App) -> None:
    closes = kit(app)
    (live,) = await live_runs(app, 1)
    await seed(app, "/tmp/orphan", ("default", "gone", 1), ttl_ms=1)
    await seed(app, "/tmp/young", ("default", "gone", 2), ttl_ms=3_600_000)
    await seed(app, "/tmp/live", live, ttl_ms=1)
    await anyio.sleep(0.01)  # 1 ms TTLs run out
    assert await app.ledger.janitor_pass("janitor") == 1
    assert closes.calls == ["/tmp/orphan"]
    assert await app.ledger.janitor_pass("janitor") == 0  # idempotent


async def test_claims_are_fenced_by_the_owner(app: App) -> None:
    await seed(app, "/tmp/f", ("default", "gone", 1))
    rk = resource_keys(app.prefix, "tmpdir", "/tmp/f", "old")
    assert (await app.scripts.resource_claim(rk, ("default", "gone", 2), "c", 1000))[0] is (
        ResourceClaimReply.GONE)
    assert (await app.scripts.resource_claim(rk, ("default", "gone", 1), "c", 1000))[0] is (
        ResourceClaimReply.CLAIMED)


async def test_bad_registrations_are_refused(app: App) -> None:
    app.resource_kind("tmpdir", close=lambda k: None)
    with pytest.raises(ConfigError):
        app.resource_kind("tmpdir", close=lambda k: None)
    with pytest.raises(ConfigError):
        app.resource_kind("bad kind", close=lambda k: None)
    with pytest.raises(ConfigError):
        app.resource_kind("x", close=lambda k: None, ttl=0)
    with pytest.raises(ConfigError):
        app.resource_kind("y", close="nope")  # type: ignore[arg-type]


async def test_a_close_that_fails_leaves_the_entry_and_a_sweep_gives_up_in_time(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    from leasequeue import resources

    failures: list[str] = []

    async def broken_close(key: str) -> None:
        failures.append(key)
        raise OSError("device busy")

    app.resource_kind("tmpdir", close=broken_close)
    await seed(app, "/tmp/stuck", ("default", "gone", 1))
    (owner,) = await live_runs(app, 1)
    monkeypatch.setattr(resources, "OPEN_WAIT", 0.3)
    with pytest.raises(ResourceBusy):
        async with RunResources(app.ledger, owner, "w", "l").open("tmpdir", "/tmp/stuck"):
            pass
    assert failures  # the sweep tried, and tried again, within the bound
    entry = await entry_of(app, "/tmp/stuck", "old")
    assert entry is not None and entry.owner == ("default", "gone", 1)  # kept for later
    # the run's own close failing: the error goes on, the entry stays for the reconcilers
    with pytest.raises(OSError):
        async with RunResources(app.ledger, owner, "w", "l").open("tmpdir", "/tmp/new") as v:
            assert v == "/tmp/new"
            failures.clear()
    assert failures == ["/tmp/new"]
    entry = await entry_of(app, "/tmp/new")
    assert entry is not None and entry.owner == owner

"""`leasequeue demo --saga`: two orders placed by a saga (charge the card
first: the hard step to undo; then reserve stock; then book the carrier).
The worker running the first order crashes mid-saga and the next worker
resumes it without charging twice; the second order's carrier refuses, and
the done steps are compensated in reverse. Runs on memory:// unless given a
URL; every effect goes to a ledger keyed idempotently, printed at the end."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from .app import App
from .context import Context
from .saga import Step, run_saga
from .worker import Worker

LEASE = 2.0  # seconds: the crashed worker's runs come back this soon


@dataclass
class Cluster:
    """The saga demo's workers, tasks of this process; a crash cancels a
    worker's scope with no cleanup at all (no release, no ack), what SIGKILL
    leaves behind."""

    app: App
    scopes: dict[str, anyio.CancelScope] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    crash_requests: list[str] = field(default_factory=list)
    started: int = 0

    def new_worker(self, tg: anyio.abc.TaskGroup) -> str:
        self.started += 1
        worker_id = f"worker-{self.started}"
        worker = Worker(self.app, ["demo"], concurrency=8, worker_id=worker_id,
                        lease=LEASE, reap_interval=0.5, reap_backoff=(0.0, 0.0),
                        shutdown_timeout=5)
        self.workers[worker_id] = worker
        tg.start_soon(self._run, worker_id, worker)
        return worker_id

    async def _run(self, worker_id: str, worker: Worker) -> None:
        with anyio.CancelScope() as scope:
            self.scopes[worker_id] = scope
            await worker.run()

    def crash(self, worker_id: str) -> list[str]:
        held = [run.job.id for run in self.workers[worker_id].table]
        self.scopes.pop(worker_id).cancel()
        self.workers.pop(worker_id)
        return held


def _say(text: str) -> None:
    print(f"\r{' ' * 78}\r{text}", flush=True)


@dataclass
class _Shop:
    cluster: Cluster
    ledger: dict[str, str] = field(default_factory=dict)  # "<order>:<what>" -> state
    charges: list[str] = field(default_factory=list)  # every call of the charge step
    crash_once: set[str] = field(default_factory=lambda: {"ord-1"})


def _steps(ctx: Context, order: str, shop: _Shop) -> list[Step]:
    """charge (the hard step to undo: first), reserve, ship."""
    ledger, charges, cluster = shop.ledger, shop.charges, shop.cluster

    async def charge(_: dict[str, Any]) -> str:
        charges.append(order)
        ledger[f"{order}:card"] = "charged"  # idempotent: keyed by the order
        _say(f"   {order}: card charged (run {ctx.token} on {ctx.worker_id})")
        return f"ch_{order}"

    async def refund(charge_id: str) -> None:
        ledger[f"{order}:card"] = "refunded"
        _say(f"   {order}: compensating: refunded {charge_id}")

    async def reserve(_: dict[str, Any]) -> str:
        if order in shop.crash_once:  # stands for a segfault or an OOM kill
            shop.crash_once.discard(order)
            _say(f"** {ctx.worker_id} crashes while reserving stock for {order}")
            cluster.crash_requests.append(ctx.worker_id)
            await anyio.sleep_forever()
        ledger[f"{order}:stock"] = "reserved"
        _say(f"   {order}: stock reserved (run {ctx.token} on {ctx.worker_id})")
        return f"rsv_{order}"

    async def release(reservation: str) -> None:
        ledger[f"{order}:stock"] = "released"
        _say(f"   {order}: compensating: released {reservation}")

    async def ship(_: dict[str, Any]) -> str:
        if order == "ord-2":
            _say(f"   {order}: the carrier refuses (503)")
            raise RuntimeError("carrier API answered 503")
        ledger[f"{order}:parcel"] = "booked"
        _say(f"   {order}: carrier booked")
        return f"parcel_{order}"

    async def cancel_parcel(_: str) -> None:
        ledger[f"{order}:parcel"] = "canceled"

    return [Step("charge", charge, refund), Step("reserve", reserve, release),
            Step("ship", ship, cancel_parcel)]


async def run_saga_demo(url: str = "memory://saga-demo") -> int:
    app = App(url, prefix=f"sagademo{int(time.time())}")
    cluster = Cluster(app)
    shop = _Shop(cluster)

    @app.job(queue="demo", max_attempts=3)
    async def place_order(ctx: Context, order: str) -> dict[str, Any]:
        return await run_saga(ctx, _steps(ctx, order, shop))

    print(f"leasequeue saga demo on {url}: two orders, charge -> reserve -> ship\n")
    for order in ("ord-1", "ord-2"):
        await app.enqueue("place_order", {"order": order}, job_id=order)
    async with anyio.create_task_group() as tg:
        cluster.new_worker(tg)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await anyio.sleep(0.05)
            while cluster.crash_requests:
                victim = cluster.crash_requests.pop()
                if victim in cluster.workers:
                    cluster.crash(victim)
                    _say("   its lease runs out; a new worker resumes the saga from Redis")
                    cluster.new_worker(tg)
            states = [(await app.get_job(o, "demo")).state for o in ("ord-1", "ord-2")]
            if all(s in ("succeeded", "dead") for s in states):
                break
        for worker in cluster.workers.values():
            worker.stop()
    return await _report(app, shop.ledger, shop.charges)


async def _report(app: App, ledger: dict[str, str], charges: list[str]) -> int:
    one, two = await app.get_job("ord-1", "demo"), await app.get_job("ord-2", "demo")
    print()
    for rec in (one, two):
        saga = rec.saga or {}
        steps = ", ".join(f"{name} {state}" for name, state, _ in saga.get("steps", []))
        reason = f" ({rec.reason})" if rec.reason else ""
        print(f"{rec.id}: job {rec.state}{reason}; saga {saga.get('status')}: {steps}")
    print("\nledger:", ", ".join(f"{k}={v}" for k, v in sorted(ledger.items())))
    print(f"card charged {charges.count('ord-1')} time(s) for ord-1 across the crash")
    await app.close()
    ok = (one.state == "succeeded" and charges.count("ord-1") == 1
          and ledger.get("ord-1:parcel") == "booked"
          and two.state == "dead" and two.reason == "saga-compensated"
          and ledger.get("ord-2:card") == "refunded" and ledger.get("ord-2:stock") == "released")
    return 0 if ok else 1

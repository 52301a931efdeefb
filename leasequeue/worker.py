"""Worker: composes the run table, claimer, starter, executors, acker,
heartbeater, reaper, timeouts and scheduler in one anyio task group. It never calls
Redis itself beyond the boot checks."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import anyio

from .app import App
from .errors import ConfigError, ScriptError
from .hooks import SETTLED, RunEnd
from .limiter import Limiter
from .log import get_log
from .loops import running_loop
from .redact import redact_url
from .registry import JobDefinition
from .resources import RunResources
from .runtime.acker import Acker, AckerParams
from .runtime.breakers import BreakerGate
from .runtime.claimer import Claimer, ClaimerParams
from .runtime.dispatch import Dispatch
from .runtime.executor import Executor, ExecutorParams
from .runtime.heartbeater import Heartbeater, HeartbeaterParams
from .runtime.held import HeldParams, HeldRuns
from .runtime.janitor import Janitor, JanitorParams
from .runtime.limits import Limits, LimitsParams
from .runtime.rates import Rates, RatesParams
from .runtime.reaper import Reaper, ReaperParams
from .runtime.runs import RunRecord, RunTable, StopReason
from .runtime.runstate import RunStateParams, RunStateStore
from .runtime.scheduler import Scheduler, SchedulerParams
from .runtime.slots import Slots
from .runtime.starter import Starter, StarterParams
from .runtime.timeouts import TimeoutParams, TimeoutWatch
from .store.connection import is_cluster, is_memory_url
from .store.keys import check_queue_name, check_worker_id
from .store.record import text
from .store.shards import logical
from .store.translate import redis_errors

# maxmemory policies that may delete our keys (leases would vanish silently)
EVICTING = {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
            "volatile-random", "volatile-ttl"}


def default_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "_.:-" else "-" for c in socket.gethostname())
    return f"{host[:100]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs an App's handlers: claims jobs from ``queues`` (default: every
    queue the App's handlers use), runs up to ``concurrency`` at once, renews
    their leases, settles them, reaps expired leases and fires schedules.
    ``await worker.run()`` until ``worker.stop()`` (or SIGTERM / SIGINT with
    ``handle_signals=True``)."""

    def __init__(
        self,
        app: App,
        queues: Sequence[str] | None = None,
        *,
        concurrency: int = 10,
        worker_id: str | None = None,
        lease: float = 30.0,
        shutdown_timeout: float = 30.0,
        reap_interval: float | None = None,
        reap_backoff: tuple[float, float] = (1.0, 60.0),
        allow_eviction: bool = False,
        handle_signals: bool = False,
        limiter: Limiter | None = None,
        queue_limits: dict[str, int] | None = None,
        max_abandoned: int = 1,
        schedule_poll: float = 1.0,
        janitor_interval: float = 30.0,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        if lease < 1.0:
            raise ConfigError(f"lease must be >= 1 second, got {lease}")
        if not (isinstance(schedule_poll, int | float) and 0.05 <= schedule_poll <= 60):
            raise ConfigError(f"schedule_poll must be seconds in [0.05, 60], got {schedule_poll!r}")
        if not isinstance(max_abandoned, int) or max_abandoned < 1:
            raise ConfigError(f"max_abandoned must be an int >= 1, got {max_abandoned!r}")
        if not (isinstance(janitor_interval, int | float) and janitor_interval >= 0.1):
            raise ConfigError(f"janitor_interval must be seconds >= 0.1, got {janitor_interval!r}")
        self.app = app
        self.queues = [check_queue_name(q) for q in (queues or app.known_queues())]
        # a sharded queue is claimed from every shard, the claimer rotating over all
        self.physical_queues = [p for q in self.queues for p in app.shards.physical(q)]
        self.concurrency = concurrency
        self.worker_id = check_worker_id(worker_id or default_worker_id())
        #: this process's life: resources recorded by an earlier life of the
        #: same worker id are closed at boot (pass a stable worker_id for that)
        self.life = uuid.uuid4().hex[:12]
        self.lease_ms = int(lease * 1000)
        self.shutdown_timeout = shutdown_timeout
        self.allow_eviction = allow_eviction
        self.handle_signals = handle_signals
        self.max_abandoned = max_abandoned
        #: set when the worker stopped because abandoned threads reached
        #: max_abandoned: its process should exit (the CLI exits with code 3)
        self.abandoned_cap_reached = False
        #: handler threads still running when the worker stopped (their
        #: process should exit to end them)
        self.left_behind = 0
        self._log = get_log("worker", worker_id=self.worker_id)
        self._stop = anyio.Event()
        self.ready = anyio.Event()  # set once the boot checks passed and claiming starts
        self._hard_stop = False

        keys = app.keys
        if limiter is not None:
            limiter.bind(app.redis, app.url, app.prefix)
        self.limits = Limits(LimitsParams(
            limiter or app.limiter, {**app.queue_limits, **(queue_limits or {})},
            self.worker_id, app.prefix, app.scripts, keys))
        self.rates = Rates(RatesParams(limiter or app.limiter, app.queue_rates, app.prefix))
        definitions = app.registry.all()
        self.slots = Slots(concurrency)
        self.table = RunTable(lease, self.worker_id)
        self.acker = Acker(AckerParams(app.scripts, keys, self._acked))
        self.starter = Starter(StarterParams(app.scripts, keys, self.table))
        self.runstate = RunStateStore(RunStateParams(app.scripts, keys, self.table))
        self.breakers = BreakerGate(self.worker_id)
        self.executor = Executor(ExecutorParams(
            app.scripts, app.registry, keys, self.table, self.slots, self.acker, self.starter,
            self.limits, self.rates, self.worker_id, anyio.CapacityLimiter(concurrency), lease,
            app.hooks, self.runstate, self.breakers,
            self._run_resources if app.resource_kinds else None))
        self.claimer = Claimer(ClaimerParams(
            app.redis, app.scripts, self.physical_queues, keys, self.slots, self.table,
            self.lease_ms, self.worker_id,
            frozenset(q for q in self.physical_queues
                      if self.limits.limited_queue(q, definitions)
                      or self.rates.limited_queue(q, definitions)
                      # a run held back by a breaker must not have its attempt counted
                      or any(d.breakers for d in definitions if d.queue == logical(q))),
            blocking=not is_memory_url(app.url), cluster=is_cluster(app.redis),
            lane=app.scripts.lane))
        self.held = HeldRuns(HeldParams(app.scripts, keys, self.table, self.slots))
        self.heartbeater = Heartbeater(HeartbeaterParams(
            app.scripts, keys, self.table, lease, self.limits.limiter, self.limits.lease_s))
        self.reaper = Reaper(ReaperParams(
            app.scripts, self.physical_queues, keys,
            reap_interval if reap_interval is not None else min(5.0, lease / 2),
            int(reap_backoff[0] * 1000), int(reap_backoff[1] * 1000),
            _budgets(self.physical_queues, definitions),
            (app.registry.defaults.max_attempts, app.registry.defaults.max_infra_attempts),
            app.hooks.reaped if app.hooks.wants("on_reaped") else None))
        self.scheduler = Scheduler(SchedulerParams(
            app.scripts, app.schedules.keys, app.schedules.enqueue, self.worker_id, schedule_poll))
        self.timeouts = TimeoutWatch(TimeoutParams(self.table, max_abandoned,
                                                   self._abandoned_cap))
        self.janitor = Janitor(JanitorParams(app.ledger, app.scripts, app.limiter_prefix,
                                             self.worker_id, self.life, janitor_interval))

    def _run_resources(self, run: RunRecord) -> RunResources:
        job = run.job
        return RunResources(self.app.ledger, (job.queue, job.id, job.token), self.worker_id,
                            self.life)

    # -- control --------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: no more claims; running jobs get until shutdown_timeout."""
        self._stop.set()

    def _abandoned_cap(self, abandoned: int) -> None:
        self._log.error(
            "abandoned handler threads reached max_abandoned: stopping the worker so that its "
            "process can exit and end them; their jobs run again after their leases lapse",
            abandoned=abandoned, max_abandoned=self.max_abandoned)
        self.abandoned_cap_reached = True
        self.stop()

    def _acked(self, run: RunRecord, accepted: bool) -> None:
        self.table.settled(run, accepted)
        if run.info is not None:
            self.app.hooks.settled(run.info, SETTLED[run.info.pending if accepted
                                                     else RunEnd.LOST])
        if not accepted:
            self._log.warning("ack refused: lease lost; result discarded", **run.fields())
        elif self._log.enabled(10):
            self._log.debug("job finished", **run.fields())

    @property
    def abandoned(self) -> int:
        """Handler threads past their stop grace that have not returned."""
        return self.table.abandoned

    # -- the run --------------------------------------------------------------

    async def run(self) -> None:
        """Boot (check Redis, the queues' shard counts, record schedules),
        then work until stopped; returns after a graceful shutdown."""
        await self._boot()
        dispatch = Dispatch()
        async with anyio.create_task_group() as services:
            # services outlive the work: leases stay renewed, starts marked and
            # acks flushed until the last run is settled
            services.start_soon(self.heartbeater.run)
            services.start_soon(self.reaper.run)
            services.start_soon(self.acker.run)
            services.start_soon(self.starter.run)
            services.start_soon(self.runstate.run)
            services.start_soon(self.timeouts.run)
            services.start_soon(self.scheduler.run)
            if self.app.resource_kinds:
                services.start_soon(self.janitor.run)
            if self.handle_signals:
                services.start_soon(self._watch_signals)
            self.ready.set()
            async with anyio.create_task_group() as work:
                for _ in range(self.concurrency):
                    work.start_soon(self.executor.serve, dispatch)
                work.start_soon(self._claim_until_stopped, dispatch)
            # shutdown order: 1. claims stopped, 2. runs finished, returned to
            # the queue or left behind, 3. acks flushed, 4. services stopped
            self.acker.close()
            with anyio.move_on_after(10):
                await self.acker.finished.wait()
            services.cancel_scope.cancel()
        self._log.info("worker stopped", still_held=len(self.table),
                       left_behind=self.left_behind, schedule_fires=self.scheduler.fired)

    async def _claim_until_stopped(self, dispatch: Dispatch) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._wait_stop_then_cancel, tg.cancel_scope)
                tg.start_soon(self.held.run, dispatch)
                await self.claimer.run(dispatch)
        finally:
            # executors release what was claimed but not started, finish what
            # they run, then return
            self.executor.draining = True
            dispatch.close()
        self._log.info("stopping: no more claims", running=len(self.table.running()),
                       deadline_s=self.shutdown_timeout)
        with anyio.move_on_after(self.shutdown_timeout if not self._hard_stop else 0):
            await self.slots.wait_empty()
        await self._stop_running()

    async def _stop_running(self) -> None:
        """Stop what still runs; a sync handler gets its stop grace, then is
        left behind (its lease lapses; the job runs again elsewhere)."""
        for run in self.table.running():
            self.table.stop(run, StopReason.SHUTDOWN)
        grace = max((r.stop_grace for r in self.table.running() if r.is_sync), default=0.0)
        with anyio.move_on_after(grace):
            await self.slots.wait_empty()
        for run in self.table.running():
            if run.thread_scope is not None:
                self.left_behind += 1
                run.thread_scope.cancel()

    async def _wait_stop_then_cancel(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()
        with anyio.CancelScope(shield=True):  # the claimer's idle wait is shielded: end it
            await self.claimer.interrupt()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self._stop.is_set():
                    self._log.warning("second signal: stopping running jobs now")
                    self._hard_stop = True
                    for run in self.table.running():
                        self.table.stop(run, StopReason.SHUTDOWN)
                else:
                    self._log.info("signal received: graceful shutdown",
                                   signal=signal.Signals(signum).name)
                    self.stop()

    # -- boot -----------------------------------------------------------------

    async def _boot(self) -> None:
        await self.app.ping()
        if not is_memory_url(self.app.url):
            await self._check_eviction()
        await self.app.verify_queues(self.queues)
        await self._check_access()
        self._log.info("worker starting", queues=self.queues,
                       shards={q: self.app.shards.count(q) for q in self.queues
                               if self.app.shards.count(q) > 1},
                       concurrency=self.concurrency, loop=running_loop(),
                       lease_s=self.lease_ms / 1000, prefix=self.app.prefix,
                       shutdown_timeout=self.shutdown_timeout)
        definitions = self.app.registry.all()
        limited = self.limits.queue_limits or any(d.max_concurrent for d in definitions)
        if limited:
            await self.limits.limiter.check()
            self._log.info("limits", limiter=self.limits.limiter.description,
                           queue_limits=self.limits.queue_limits)
        if self.rates.queue_rates or any(d.rate for d in definitions):
            await self.limits.limiter.check()  # rates are counted in Redis, always
            self._log.info("rate limits", counted_in=self.limits.limiter.rates.prefix,
                           queue_rates={q: r.describe()
                                        for q, r in self.rates.queue_rates.items()})
        if not definitions:
            self._log.warning("no jobs are registered: this worker can run nothing")
        for d in definitions:
            counted_by = self.limits.limiter.description if d.max_concurrent else None
            self._log.info("job registered", limiter=counted_by, **d.describe())
            if d.queue not in self.queues:
                self._log.warning("job's queue is not consumed by this worker: it will never "
                                  "run here", job=d.name, queue=d.queue, consumed=self.queues)
        await self._boot_schedules()
        await self._boot_kit()

    async def _boot_kit(self) -> None:
        """Log the circuit breakers; close what an earlier life of this worker
        id left open (the resource ledger's boot cleanup)."""
        for breaker in self.app.breakers.values():
            self._log.info("breaker", **breaker.describe())
        if self.app.resource_kinds:
            closed = await self.app.ledger.boot_cleanup(self.worker_id, self.life)
            self._log.info("resource ledger: boot cleanup", closed=closed, life=self.life)

    async def _check_access(self) -> None:
        """A Redis user that may not work a queue (a producer's, a viewer's, or
        another queue's worker) is refused here, at boot, with PermissionDenied
        naming the keys, instead of failing every claim later: start.lua with
        no runs is a no-op that needs read and write access to the queue's
        leases and job records (SECURITY.md)."""
        for queue in self.physical_queues:
            await self.app.scripts.start(self.app.keys(queue), [])

    async def _boot_schedules(self) -> None:
        """Record the declared schedules; log every recorded one with its next
        fire (this worker's scheduler fires them all, with the other workers)."""
        now, records = await self.app.schedules.record()
        for rec in records:
            if rec.problem:
                self._log.error("schedule record malformed: skipped", **rec.describe(now))
            else:
                self._log.info("schedule", **rec.describe(now))

    async def _check_eviction(self) -> None:
        for where, policy in await self._eviction_policies():
            if policy in EVICTING and not self.allow_eviction:
                raise ConfigError(
                    f"Redis maxmemory-policy is {policy!r} on {where}: it may evict leases and "
                    "jobs silently. Set it to noeviction, or pass allow_eviction=True to "
                    "accept the risk."
                )
            if policy in EVICTING:
                self._log.warning("maxmemory-policy may evict keys", policy=policy, node=where)

    async def _eviction_policies(self) -> list[tuple[str, str]]:
        """maxmemory-policy of the server, or of every master of a cluster."""
        redis: Any = self.app.redis
        try:
            with redis_errors(self.app.url, "config get"):
                return await self._read_policies(redis)
        except ScriptError as exc:  # CONFIG disabled on managed services
            self._log.warning("cannot read maxmemory-policy; make sure it is noeviction",
                              error=str(exc))
            return []

    async def _read_policies(self, redis: Any) -> list[tuple[str, str]]:
        if not is_cluster(redis):
            config = await redis.config_get("maxmemory-policy")
            return [(redact_url(self.app.url), _policy(config))]
        policies = []
        for node in redis.get_primaries():
            config = await redis.config_get("maxmemory-policy", target_nodes=node)
            policies.append((node.name, _policy(config)))
        return policies


def _policy(config: Any) -> str:
    return text(config.get(b"maxmemory-policy") or config.get("maxmemory-policy") or "")




def _budgets(queues: Sequence[str],
             definitions: list[JobDefinition]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per physical queue, the budgets of the jobs defined for it."""
    return {q: {d.name: (d.max_attempts, d.max_infra_attempts) for d in definitions
                if d.queue == logical(q)} for q in queues}

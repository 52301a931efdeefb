"""Worker: composes the claimer, executors, acker, heartbeater and reaper in
one anyio task group. It never calls Redis itself beyond the boot checks."""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
from redis.exceptions import ResponseError

from .app import App
from .errors import ConfigError
from .limiter import Limiter
from .log import get_log
from .runtime.acker import Acker
from .runtime.claimer import Claimer
from .runtime.dispatch import Dispatch
from .runtime.executor import Executor
from .runtime.handler import Run
from .runtime.heartbeater import Heartbeater
from .runtime.leases import LeaseTable
from .runtime.limits import Limits
from .runtime.reaper import Reaper
from .runtime.slots import Slots
from .runtime.timeouts import TimeoutWatch
from .store.connection import is_cluster, is_memory_url
from .store.keys import check_queue_name, check_worker_id
from .store.record import text

# maxmemory policies that may delete our keys (leases would vanish silently)
EVICTING = {"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu",
            "volatile-random", "volatile-ttl"}


def default_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in "_.:-" else "-" for c in socket.gethostname())
    return f"{host[:100]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
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
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {concurrency}")
        if lease < 1.0:
            raise ConfigError(f"lease must be >= 1 second, got {lease}")
        self.app = app
        self.queues = [check_queue_name(q) for q in (queues or app.known_queues())]
        # a sharded queue is claimed from every shard, the claimer rotating over all
        self.physical_queues = [p for q in self.queues for p in app.shards.physical(q)]
        self.concurrency = concurrency
        self.worker_id = check_worker_id(worker_id or default_worker_id())
        self.lease_ms = int(lease * 1000)
        self.shutdown_timeout = shutdown_timeout
        self.allow_eviction = allow_eviction
        self.handle_signals = handle_signals
        self._log = get_log("worker", worker_id=self.worker_id)
        self._stop = anyio.Event()
        self.ready = anyio.Event()  # set once the boot checks passed and claiming starts
        self._hard_stop = False
        self._claim_scope: anyio.CancelScope | None = None

        keys = app.keys
        if limiter is not None:
            limiter.bind(app.redis, app.url, app.prefix)
        self.limits = Limits(limiter or app.limiter, {**app.queue_limits, **(queue_limits or {})},
                             self.worker_id, app.scripts, keys)
        self.slots = Slots(concurrency)
        self.table = LeaseTable()
        self.acker = Acker(app.scripts, keys, self._acked)
        self.executor = Executor(app.scripts, app.registry, keys, self.table, self.slots,
                                 self.acker, self.worker_id, anyio.CapacityLimiter(concurrency),
                                 self.limits)
        self.claimer = Claimer(app.redis, app.scripts, self.physical_queues, keys, self.slots,
                               self.table, self.lease_ms, self.worker_id,
                               blocking=not is_memory_url(app.url),
                               cluster=is_cluster(app.redis))
        self.heartbeater = Heartbeater(app.scripts, self.table, self.lease_ms, keys, self.limits)
        self.reaper = Reaper(
            app.scripts, self.physical_queues, keys,
            reap_interval if reap_interval is not None else min(5.0, lease / 2),
            int(reap_backoff[0] * 1000), int(reap_backoff[1] * 1000),
        )

    # -- control --------------------------------------------------------------

    def stop(self) -> None:
        """Graceful stop: no more claims; running jobs get until shutdown_timeout."""
        self._stop.set()

    def _acked(self, run: Run, accepted: bool) -> None:
        self.table.remove(run.job)
        if not accepted:
            run.ctx.log.warning("ack refused: lease lost; result discarded")
        elif self._log.enabled(10):
            run.ctx.log.debug("job finished")

    # -- the run --------------------------------------------------------------

    async def run(self) -> None:
        await self._boot()
        dispatch = Dispatch()
        async with anyio.create_task_group() as services:
            # services outlive the work: leases stay renewed and acks flush
            # until the last run is settled
            services.start_soon(self.heartbeater.run)
            services.start_soon(self.reaper.run)
            services.start_soon(self.acker.run)
            services.start_soon(TimeoutWatch(self.executor.running).run)
            if self.handle_signals:
                services.start_soon(self._watch_signals)
            self.ready.set()
            async with anyio.create_task_group() as work:
                for _ in range(self.concurrency):
                    work.start_soon(self.executor.serve, dispatch)
                work.start_soon(self._claim_until_stopped, dispatch)
            # shutdown order: 1. claims stopped, 2. runs finished or returned
            # to the queue, 3. acks flushed, 4. services stopped
            self.acker.close()
            with anyio.move_on_after(10):
                await self.acker.finished.wait()
            services.cancel_scope.cancel()
        self._log.info("worker stopped", still_held=len(self.table))

    async def _claim_until_stopped(self, dispatch: Dispatch) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._wait_stop_then_cancel, tg.cancel_scope)
                await self.claimer.run(dispatch)
        finally:
            # executors release what was claimed but not started, finish what
            # they run, then return
            self.executor.draining = True
            dispatch.close()
        self._log.info("stopping: no more claims", running=len(self.executor.running),
                       deadline_s=self.shutdown_timeout)
        with anyio.move_on_after(self.shutdown_timeout if not self._hard_stop else 0):
            await self.slots.wait_empty()
        for run in list(self.executor.running):
            run.stop("shutdown")

    async def _wait_stop_then_cancel(self, scope: anyio.CancelScope) -> None:
        await self._stop.wait()
        scope.cancel()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self._stop.is_set():
                    self._log.warning("second signal: stopping running jobs now")
                    self._hard_stop = True
                    for run in list(self.executor.running):
                        run.stop("shutdown")
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
        self._log.info("worker starting", queues=self.queues,
                       shards={q: self.app.shards.count(q) for q in self.queues
                               if self.app.shards.count(q) > 1},
                       concurrency=self.concurrency,
                       lease_s=self.lease_ms / 1000, prefix=self.app.prefix,
                       shutdown_timeout=self.shutdown_timeout)
        definitions = self.app.registry.all()
        limited = self.limits.queue_limits or any(d.max_concurrent for d in definitions)
        if limited:
            await self.limits.limiter.check()
            self._log.info("limits", limiter=self.limits.limiter.description,
                           queue_limits=self.limits.queue_limits)
        if not definitions:
            self._log.warning("no jobs are registered: this worker can run nothing")
        for d in definitions:
            counted_by = self.limits.limiter.description if d.max_concurrent else None
            self._log.info("job registered", limiter=counted_by, **d.describe())
            if d.queue not in self.queues:
                self._log.warning("job's queue is not consumed by this worker: it will never "
                                  "run here", job=d.name, queue=d.queue, consumed=self.queues)

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
            if not is_cluster(redis):
                config = await redis.config_get("maxmemory-policy")
                return [(self.app.url, _policy(config))]
            policies = []
            for node in redis.get_primaries():
                config = await redis.config_get("maxmemory-policy", target_nodes=node)
                policies.append((node.name, _policy(config)))
            return policies
        except ResponseError as exc:  # CONFIG disabled on managed services
            self._log.warning("cannot read maxmemory-policy; make sure it is noeviction",
                              error=str(exc))
            return []


def _policy(config: Any) -> str:
    return text(config.get(b"maxmemory-policy") or config.get("maxmemory-policy") or "")



"""The demo's workers, started and killed on request: real processes for a
Redis URL (a kill is SIGKILL), or tasks in this process for memory:// (a
kill cancels the worker's task: no ack, no release of what it holds — what
SIGKILL leaves behind, as near as one process can come). It never decides
when to kill (the demo's scenes do)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any, Protocol

import anyio
import anyio.abc

from .app import App
from .demo_app import CRON_QUEUE, PREFIX_ENV, QUEUE, build_app
from .errors import RedisUnavailable
from .worker import Worker

LEASE = 2.0
CONCURRENCY = 8


class Workers(Protocol):
    """What a scene may do with the demo's workers."""

    kind: str  # "processes" | "tasks"

    def start(self) -> str: ...

    def kill(self, worker_id: str) -> None: ...

    async def gone(self, worker_id: str) -> None:
        """Return once a killed worker can write nothing more (its process
        reaped; its task ended, the calls it had in flight answered)."""

    def died(self) -> list[str]:
        """Workers that died on their own since the last call."""

    def alive(self) -> list[str]: ...

    async def stop(self) -> None:
        """Stop the live workers gracefully."""

    async def close(self) -> None:
        """Release what the workers' side opened (after stop() returned)."""


class TaskWorkers:
    """Workers as tasks of one task group (memory://), each with an App of its
    own. A kill first cuts that App off (every script call fails, as for a
    process that is gone: nothing it would still write reaches the store),
    then cancels the worker's task."""

    kind = "tasks"

    def __init__(self, url: str, prefix: str, tg: anyio.abc.TaskGroup) -> None:
        self.url = url
        self.prefix = prefix
        self.tg = tg
        self.started = 0
        self.scopes: dict[str, anyio.CancelScope] = {}
        self.ended: dict[str, anyio.Event] = {}  # set when a worker's task returns
        self.workers: dict[str, Worker] = {}
        self.apps: list[App] = []
        self.crashing: list[str] = []  # the poison job asks for its worker's death here

    def crash(self, worker_id: str) -> None:
        self.crashing.append(worker_id)

    def start(self) -> str:
        self.started += 1
        worker_id = f"worker-{self.started}"
        app = build_app(self.url, self.prefix, crash=self.crash)
        self.apps.append(app)
        worker = Worker(app, [QUEUE, CRON_QUEUE], concurrency=CONCURRENCY,
                        worker_id=worker_id, lease=LEASE, reap_interval=0.5,
                        reap_backoff=(0.0, 0.0), shutdown_timeout=5)
        self.workers[worker_id] = worker
        self.tg.start_soon(self._run, worker_id, worker)
        return worker_id

    async def _run(self, worker_id: str, worker: Worker) -> None:
        ended = self.ended[worker_id] = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self.scopes[worker_id] = scope
                await worker.run()
        finally:
            ended.set()

    def kill(self, worker_id: str) -> None:
        worker = self.workers.pop(worker_id)
        scripts: Any = worker.app.scripts
        url = worker.app.url

        async def gone(*args: object, **kwargs: object) -> None:
            raise RedisUnavailable(url, ConnectionError(f"the demo killed {worker_id}"))

        scripts.run = scripts.run_durable = gone
        self.scopes.pop(worker_id).cancel()

    async def gone(self, worker_id: str) -> None:
        # a call the task had in flight when it was cut off (a shielded claim,
        # an ack on its way) still lands: the task ends after it
        ended = self.ended.get(worker_id)
        if ended is not None:
            with anyio.move_on_after(10):
                await ended.wait()

    def died(self) -> list[str]:
        dead = [w for w in dict.fromkeys(self.crashing) if w in self.workers]
        self.crashing.clear()
        for worker_id in dead:
            self.kill(worker_id)
        return dead

    def alive(self) -> list[str]:
        return list(self.workers)

    async def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()

    async def close(self) -> None:
        for app in self.apps:
            await app.close()


class ProcessWorkers:
    """Workers as `leasequeue worker` processes on a Redis URL; their output
    goes to the demo's log file."""

    kind = "processes"

    def __init__(self, url: str, prefix: str, log: IO[bytes]) -> None:
        self.url = url
        self.prefix = prefix
        self.log = log
        self.started = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> str:
        self.started += 1
        worker_id = f"worker-{self.started}"
        env = dict(os.environ)
        env[PREFIX_ENV] = self.prefix
        # the child imports this very package, installed or not
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.procs[worker_id] = subprocess.Popen(
            [sys.executable, "-m", "leasequeue.cli", "worker", "leasequeue.demo_app:app",
             "--url", self.url, "--worker-id", worker_id, "--queue", QUEUE, "--queue",
             CRON_QUEUE, "--concurrency", str(CONCURRENCY), "--lease", str(LEASE),
             "--reap-interval", "0.5", "--reap-backoff-base", "0", "--reap-backoff-cap", "0",
             "--shutdown-timeout", "5"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return worker_id

    def kill(self, worker_id: str) -> None:
        proc = self.procs.pop(worker_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    async def gone(self, worker_id: str) -> None:
        return None  # kill() reaped the process

    def died(self) -> list[str]:
        dead = [w for w, p in self.procs.items() if p.poll() is not None]
        for worker_id in dead:
            del self.procs[worker_id]
        return dead

    def alive(self) -> list[str]:
        return list(self.procs)

    async def close(self) -> None:
        return None

    async def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                await anyio.to_thread.run_sync(proc.wait, max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()

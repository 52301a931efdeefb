"""Worker processes for tests: started with the CLI, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.harness.redis_proc import env_with_path


@dataclass
class WorkerProcs:
    url: str
    prefix: str
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, worker_id: str, *args: str, app: str = "tests.harness.apps.worker_app:app",
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a CLI worker; ``env`` adds (or overrides) environment variables."""
        full_env = env_with_path()
        full_env.update(LQ_URL=self.url, LQ_PREFIX=self.prefix)
        full_env.update(env or {})
        log = open(self.log_dir / f"{worker_id}.log", "ab")
        self._logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "leasequeue.cli", "worker", app, "--worker-id", worker_id,
             *args],
            env=full_env, stdout=log, stderr=subprocess.STDOUT,
        )
        self.procs[worker_id] = proc
        return proc

    def kill(self, worker_id: str) -> None:
        proc = self.procs.pop(worker_id)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def terminate(self, worker_id: str) -> None:
        """Ask one worker to stop gracefully (SIGTERM) without waiting; exited()
        reports it once it is gone."""
        self.procs[worker_id].send_signal(signal.SIGTERM)

    def exited(self) -> dict[str, int]:
        """Forget the workers that have exited on their own; their exit codes by id."""
        gone = {wid: code for wid, proc in self.procs.items()
                if (code := proc.poll()) is not None}
        for wid in gone:
            del self.procs[wid]
        return gone

    def terminate_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> WorkerProcs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate_all()

    def log(self, worker_id: str) -> str:
        return (self.log_dir / f"{worker_id}.log").read_text(errors="replace")

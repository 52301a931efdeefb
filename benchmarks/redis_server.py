"""The harness's own redis-server: a free loopback port, no persistence, and
stopped at the end. The Redis on 6379 (if any) is never touched."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class RedisServer:
    def __init__(self) -> None:
        self.port = free_port()
        while self.port == 6379:  # paranoia: the shared default port
            self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lq-bench-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("redis-server is not installed (apt-get install redis-server)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.dir), "--logfile",
             str(self.dir / "redis.log"), "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while self.cli("PING") != "PONG":
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"redis-server did not start (see {self.dir}/redis.log)")
            time.sleep(0.05)

    def cli(self, *args: str) -> str:
        """One command through redis-cli (the orchestrator needs no redis-py)."""
        try:
            out = subprocess.run(["redis-cli", "-p", str(self.port), *args],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return out.stdout.strip()

    def pin(self, cpus: set[int]) -> None:
        """Every thread of the server on ``cpus`` (sched_setaffinity of its pid
        sets the main thread's only; redis-server has background threads)."""
        assert self.proc is not None
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            os.sched_setaffinity(int(tid), cpus)

    def flush(self) -> None:
        self.cli("FLUSHALL")

    def version(self) -> str:
        for line in self.cli("INFO", "server").splitlines():
            if line.startswith("redis_version:"):
                return line.split(":", 1)[1].strip()
        return "?"

    def __enter__(self) -> RedisServer:
        """``with RedisServer() as server:`` starts it, and stops it (its
        folder removed) however the block ends."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

"""Start and stop throwaway redis-server processes on free loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.harness.tls import TlsFiles


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("redis-server is not installed (CI installs it with apt)")
    return found


@dataclass
class RedisProcess:
    """One redis-server on 127.0.0.1; start() again after stop() keeps port and data dir."""

    extra: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lq-redis-")))
    proc: subprocess.Popen[bytes] | None = None
    password: str | None = None  # requirepass (the default user's password)
    tls: TlsFiles | None = None  # TLS only (no plain port) with this certificate
    _started: bool = False  # started once: a restart keeps its port

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls is not None:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls.ca_cert}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _listen_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls.cert),
                "--tls-key-file", str(self.tls.key), "--tls-ca-cert-file",
                str(self.tls.ca_cert), "--tls-auth-clients", "no"]

    def client(self, **options: Any) -> redis.Redis:
        """A sync client of this server (its password, its TLS)."""
        return redis.Redis.from_url(self.url, **options)

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers. Its first start takes
        another free port when the one drawn was taken meanwhile (free_port
        closes its socket before redis-server binds it: a process beside,
        such as the planted-bug runner's second test run, may bind it
        first); a start after stop() keeps its port. The wait asks with a
        read timeout, and only this process's server counts: a silent
        listener on the port (a test's proxy) once hung the wait for good,
        and another process's Redis would answer for it (found 2026-12-08:
        a planted bug's run that hung 120 s in CI with no test run)."""
        for _ in range(5):
            if self._launch(timeout):
                self._started = True
                return
            if self._started:
                break  # (a restart keeps its port: its exit is an error)
            self.port = free_port()
        raise RuntimeError(f"redis-server on port {self.port} did not start "
                           f"(see {self.dir / 'redis.log'})")

    def _launch(self, timeout: float) -> bool:
        """One try: True once this process's server answers; False when it
        exited without answering (its port taken); RuntimeError when it
        neither answers nor exits within ``timeout``."""
        args = [
            redis_server_binary(), *self._listen_args(), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.dir),
            "--logfile", str(self.dir / "redis.log"),
            *(["--requirepass", self.password] if self.password else []), *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        client = self.client(socket_connect_timeout=0.2, socket_timeout=0.5)
        try:
            while True:
                try:
                    if client.ping() and self._answered_by_its_process(client):
                        return True
                except redis.exceptions.RedisError:
                    pass
                if self.proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start "
                                       f"(see {self.dir / 'redis.log'})")
                time.sleep(0.02)
        finally:
            client.close()

    def _answered_by_its_process(self, client: redis.Redis) -> bool:
        """Whether the server that answered is this one's process (INFO's
        process_id; a server whose default user may not run INFO is taken
        as its own: its ping came with this one's password)."""
        try:
            return int(client.info("server")["process_id"]) == getattr(self.proc, "pid", None)
        except redis.exceptions.ResponseError:
            return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisProcess:
        """Started on entry; stopped and its data dir removed on exit."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               error: type[Exception] = RuntimeError, interval: float = 0.05) -> Any:
    """Poll ``condition`` (a Redis error counts as not yet) until it is truthy;
    raise ``error`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except redis.exceptions.RedisError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def env_with_path() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def stall_in_background(server: RedisProcess, seconds: float) -> threading.Thread:
    """DEBUG SLEEP on a connection of its own, from a thread: Redis answers
    nobody meanwhile (the server needs --enable-debug-command). Join the
    thread to wait for the end of the stall."""
    def sleep() -> None:
        client = redis.Redis(port=server.port)
        try:
            client.execute_command("DEBUG", "SLEEP", seconds)
        finally:
            client.close()
    thread = threading.Thread(target=sleep)
    thread.start()
    return thread

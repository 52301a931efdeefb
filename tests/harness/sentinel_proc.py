"""A throwaway Sentinel setup for tests: one master, one replica
(``--replicaof``) and one sentinel (``redis-server sentinel.conf --sentinel``)
on free loopback ports; kill the master and wait until the sentinel names the
replica as the new master.

Every wait is bounded by a deadline and fails with what it was waiting for."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis

from tests.harness.redis_proc import RedisProcess, free_port, redis_server_binary, wait_until

MASTER_NAME = "mymaster"


class SentinelError(RuntimeError):
    """The setup could not be created or did not reach the awaited state."""


_wait = partial(wait_until, error=SentinelError)  # the one polling helper, this module's error


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5,
                       socket_timeout=2.0)


@dataclass
class SentinelProcess:
    """One redis-server in sentinel mode, monitoring one master."""

    master_port: int
    master_name: str = MASTER_NAME
    down_after_ms: int = 1000
    failover_timeout_ms: int = 5000
    port: int = field(default_factory=free_port)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lq-sentinel-")))
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        conf = self.dir / "sentinel.conf"  # the sentinel rewrites it: it must be writable
        conf.write_text("\n".join([
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {self.dir}",
            f"logfile {self.dir / 'sentinel.log'}",
            f"sentinel monitor {self.master_name} 127.0.0.1 {self.master_port} 1",
            f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}",
            f"sentinel failover-timeout {self.master_name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.master_name} 1",
            "",
        ]))
        self.proc = subprocess.Popen([redis_server_binary(), str(conf), "--sentinel"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def answers() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise SentinelError(f"sentinel on {self.port} exited "
                                    f"(see {self.dir / 'sentinel.log'})")
            return self.master_addr() is not None

        _wait(answers, timeout, f"sentinel on {self.port} to answer")

    def master_addr(self) -> tuple[str, int] | None:
        """What the sentinel says: SENTINEL get-master-addr-by-name."""
        with _client(self.port) as c:
            reply = c.execute_command("SENTINEL", "get-master-addr-by-name", self.master_name)
        if not reply:
            return None
        host, port = reply
        return (host.decode() if isinstance(host, bytes) else str(host)), int(port)

    def master_settled(self, port: int) -> bool:
        """The sentinel's own view of the master (SENTINEL MASTER): at ``port``,
        neither down nor in a failover. Clients ask the same question."""
        with _client(self.port) as c:
            state: dict[str, Any] = c.sentinel_master(self.master_name)
        flags = set(str(state.get("flags", "")).split(","))
        return (int(state.get("port", 0)) == port and "master" in flags
                and not flags & {"s_down", "o_down", "failover_in_progress"})

    def replicas_known(self) -> int:
        with _client(self.port) as c:
            return len(c.execute_command("SENTINEL", "replicas", self.master_name))

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class SentinelSetup:
    """Master + replica + sentinel. ``url`` is the leasequeue URL
    ``sentinel://127.0.0.1:S/mymaster``."""

    master: RedisProcess = field(default_factory=RedisProcess)
    replica: RedisProcess | None = None
    sentinel: SentinelProcess | None = None

    def start(self, timeout: float = 20.0) -> None:
        self.master.start()
        self.replica = RedisProcess(extra=["--replicaof", "127.0.0.1", str(self.master.port),
                                           "--repl-diskless-sync-delay", "0"])
        self.replica.start()
        # the master is started first: give it the same sync setting at run time
        with _client(self.master.port) as c:
            c.config_set("repl-diskless-sync-delay", "0")
        _wait(lambda: self.link_up(self.replica_port), timeout, "the replica's first sync")
        self.sentinel = SentinelProcess(self.master.port)
        self.sentinel.start(timeout)
        # the sentinel learns of the replica from the master's INFO (every 10 s at
        # first, sooner after a restart): a failover needs it known
        _wait(lambda: self.sentinel is not None and self.sentinel.replicas_known() >= 1,
              timeout, "the sentinel to discover the replica")

    @property
    def replica_port(self) -> int:
        assert self.replica is not None, "start() first"
        return self.replica.port

    @property
    def url(self) -> str:
        assert self.sentinel is not None, "start() first"
        return f"sentinel://127.0.0.1:{self.sentinel.port}/{MASTER_NAME}"

    def current_master_port(self) -> int:
        assert self.sentinel is not None, "start() first"
        addr = self.sentinel.master_addr()
        if addr is None:
            raise SentinelError("the sentinel knows no master")
        return addr[1]

    def server(self, port: int) -> RedisProcess:
        for server in (self.master, self.replica):
            if server is not None and server.port == port:
                return server
        raise KeyError(port)

    @staticmethod
    def link_up(port: int) -> bool:
        with _client(port) as c:
            info: dict[str, Any] = c.info("replication")
        return info.get("master_link_status") == "up"

    def wait_replicated(self, timeout: float = 10.0) -> None:
        """Until the replica has the master's whole replication stream."""
        master = self.current_master_port()

        def synced() -> bool:
            with _client(master) as c:
                info: dict[str, Any] = c.info("replication")
            acked = [int(v["offset"]) for k, v in info.items()
                     if k.startswith("slave") and isinstance(v, dict)]
            return bool(acked) and min(acked) >= int(info["master_repl_offset"])

        _wait(synced, timeout, "the replica to catch up")

    def kill_master(self, timeout: float = 30.0) -> int:
        """SIGKILL the current master; wait until the sentinel names the other
        server, that server says it is a master, and the sentinel's failover is
        over (before that, clients asking the sentinel find no master). Return
        its port."""
        old = self.current_master_port()
        self.server(old).kill()

        def promoted() -> int | None:
            port = self.current_master_port()
            if port == old:
                return None
            with _client(port) as c:
                role = c.execute_command("ROLE")[0]
            if role not in (b"master", "master"):
                return None
            assert self.sentinel is not None
            return port if self.sentinel.master_settled(port) else None

        new: int = _wait(promoted, timeout, f"the sentinel to promote a replica of {old}")
        return new

    def cleanup(self) -> None:
        if self.sentinel is not None:
            self.sentinel.cleanup()
        for server in (self.master, self.replica):
            if server is not None:
                server.cleanup()

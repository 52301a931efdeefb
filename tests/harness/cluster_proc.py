"""A throwaway Redis Cluster for tests: 3 masters and 3 replicas on free
loopback ports, each node in its own temp dir; kill a master (SIGKILL) and
wait for its replica to take over; restart the killed node as a replica.

Every wait is bounded by a deadline and fails with what it was waiting for."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from tests.harness.redis_proc import RedisProcess, free_port, wait_until

SLOTS = 16384


class ClusterError(RuntimeError):
    """The cluster could not be created or did not reach the awaited state."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_wait = partial(wait_until, error=ClusterError)  # the one polling helper, this module's error


@dataclass
class ClusterNode:
    """One cluster-enabled redis-server (a RedisProcess with cluster options)."""

    server: RedisProcess

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.server.proc is not None and self.server.proc.poll() is None

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5,
                           socket_timeout=2.0)

    def command(self, *args: Any) -> Any:
        with self.client() as c:
            return c.execute_command(*args)

    def cluster_info(self) -> dict[str, str]:
        raw = _text(self.command("CLUSTER", "INFO"))
        return dict(line.split(":", 1) for line in raw.split() if ":" in line)

    def role(self) -> str:
        return _text(self.command("ROLE")[0])

    def replication(self) -> dict[str, Any]:
        """INFO replication, parsed by redis-py (``slaveN`` entries are dicts)."""
        with self.client() as c:
            info: dict[str, Any] = c.info("replication")
            return info


@dataclass
class RedisCluster:
    """3 masters + 3 replicas (by default). ``start()`` raises ClusterError when
    the cluster cannot be created; ``cleanup()`` stops every node and deletes
    their dirs."""

    masters: int = 3
    replicas_per_master: int = 1
    node_timeout_ms: int = 2000
    nodes: list[ClusterNode] = field(default_factory=list)

    # -- life cycle -------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        total = self.masters * (1 + self.replicas_per_master)
        for _ in range(total):
            node_dir = Path(tempfile.mkdtemp(prefix="lq-cluster-"))
            server = RedisProcess(dir=node_dir, extra=[
                "--cluster-enabled", "yes",
                "--cluster-config-file", str(node_dir / "nodes.conf"),
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # the bus port defaults to port + 10000, which a high free port overflows
                "--cluster-port", str(free_port()),
                # replicas sync at once instead of after the 5 s diskless default
                "--repl-diskless-sync-delay", "0",
            ])
            self.nodes.append(ClusterNode(server))
            server.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise ClusterError("redis-cli is not installed (needed for --cluster create)")
        created = subprocess.run(
            [cli, "--cluster", "create", *(n.addr for n in self.nodes),
             "--cluster-replicas", str(self.replicas_per_master), "--cluster-yes"],
            capture_output=True, timeout=timeout, check=False,
        )
        if created.returncode != 0:
            raise ClusterError("redis-cli --cluster create failed: "
                               + created.stdout.decode(errors="replace")[-2000:]
                               + created.stderr.decode(errors="replace")[-2000:])
        self.wait_ok(timeout)
        # every replica attached and in sync, so a first failover has a candidate
        _wait(lambda: len(self.replica_links_up()) == self.masters * self.replicas_per_master,
              timeout, "every replica to finish its first sync")

    def cleanup(self) -> None:
        for node in self.nodes:
            node.server.cleanup()
        self.nodes.clear()

    # -- addresses --------------------------------------------------------------

    @property
    def startup_nodes(self) -> list[str]:
        return [n.addr for n in self.nodes if n.alive]

    @property
    def url(self) -> str:
        """The leasequeue URL of this cluster: ``cluster://h:p,h:p,...``."""
        return "cluster://" + ",".join(self.startup_nodes)

    def node(self, port: int) -> ClusterNode:
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def any_alive(self) -> ClusterNode:
        for n in self.nodes:
            if n.alive:
                return n
        raise ClusterError("no node is alive")

    # -- state ------------------------------------------------------------------

    def is_ok(self) -> bool:
        """cluster_state:ok with all 16384 slots assigned and ok, on every live node."""
        for n in self.nodes:
            if not n.alive:
                continue
            info = n.cluster_info()
            if (info.get("cluster_state") != "ok"
                    or info.get("cluster_slots_assigned") != str(SLOTS)
                    or info.get("cluster_slots_ok") != str(SLOTS)):
                return False
        return True

    def wait_ok(self, timeout: float = 30.0) -> None:
        _wait(self.is_ok, timeout, "cluster_state:ok and 16384 slots ok on every node")

    def slot_masters(self) -> dict[int, int]:
        """Slot -> port of the master serving it, from CLUSTER SLOTS of a live node."""
        owners: dict[int, int] = {}
        for start, end, master, *_replicas in self.any_alive().command("CLUSTER", "SLOTS"):
            port = int(master[1])
            for slot in range(int(start), int(end) + 1):
                owners[slot] = port
        return owners

    def master_ports(self) -> list[int]:
        return sorted(set(self.slot_masters().values()))

    def master_of_slot(self, slot: int) -> int:
        return self.slot_masters()[slot]

    def master_of_key(self, key: str) -> int:
        return self.master_of_slot(key_slot(key.encode()))

    def replicas_of(self, master_port: int) -> list[int]:
        """Ports of the replicas the master reports online."""
        info = self.node(master_port).replication()
        return [int(v["port"]) for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"]

    def replica_links_up(self) -> list[int]:
        """Ports of the live replicas whose link to their master is up."""
        return [n.port for n in self.nodes
                if n.alive and n.replication().get("master_link_status") == "up"]

    def wait_replicated(self, master_port: int, timeout: float = 10.0) -> None:
        """Until every replica of the master has its whole replication stream."""

        def synced() -> bool:
            info = self.node(master_port).replication()
            acked = [int(v["offset"]) for k, v in info.items()
                     if k.startswith("slave") and isinstance(v, dict)]
            return bool(acked) and min(acked) >= int(info["master_repl_offset"])

        _wait(synced, timeout, f"replicas of {master_port} to catch up")

    # -- failures ---------------------------------------------------------------

    def kill_master(self, master_port: int, timeout: float = 30.0) -> int:
        """SIGKILL a master, wait until one of its replicas serves its slots and
        the cluster is ok again; return the new master's port."""
        slots = [s for s, p in self.slot_masters().items() if p == master_port]
        if not slots:
            raise ClusterError(f"{master_port} serves no slot: not a master")
        candidates = set(_wait(lambda: self.replicas_of(master_port), timeout,
                               f"a replica of {master_port} online"))
        self.node(master_port).server.kill()

        def promoted() -> int | None:
            owner = self.slot_masters()[slots[0]]
            if owner in candidates and self.node(owner).role() == "master" and self.is_ok():
                return owner
            return None

        new_master: int = _wait(promoted, timeout,
                                f"a replica of {master_port} to be promoted")
        return new_master

    def restart(self, port: int, timeout: float = 30.0) -> None:
        """Start a killed node again (same port and nodes.conf): it rejoins as a
        replica of whoever took its slots; wait until its link is up."""
        node = self.node(port)
        node.server.start()
        _wait(lambda: node.role() == "slave" and port in self.replica_links_up(), timeout,
              f"{port} to rejoin as a replica")
        self.wait_ok(timeout)


def tag_slot(prefix: str, queue: str) -> int:
    """The slot of every key of a queue (its hash tag ``{prefix:queue}``)."""
    return key_slot(("{" + f"{prefix}:{queue}" + "}").encode())


def queues_on_distinct_masters(cluster: RedisCluster, prefix: str, count: int,
                               candidates: Iterable[str] | None = None) -> list[str]:
    """``count`` queue names whose tags ``{prefix:queue}`` fall on ``count``
    different masters."""
    owners = cluster.slot_masters()
    chosen: dict[int, str] = {}
    for queue in candidates or (f"q{i}" for i in range(10_000)):
        master = owners[tag_slot(prefix, queue)]
        chosen.setdefault(master, queue)
        if len(chosen) == count:
            return list(chosen.values())
    raise ClusterError(f"no {count} queues of prefix {prefix!r} on distinct masters")


def prefix_on_master(cluster: RedisCluster, master_port: int, queue: str,
                     stem: str = "c") -> str:
    """A prefix whose tag ``{prefix:queue}`` falls on the given master."""
    owners = cluster.slot_masters()
    for i in range(100_000):
        prefix = f"{stem}{i}"
        if owners[tag_slot(prefix, queue)] == master_port:
            return prefix
    raise ClusterError(f"no prefix puts queue {queue!r} on {master_port}")

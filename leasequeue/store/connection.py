"""Turns a URL into an async Redis client. It never runs scripts.

- ``redis://`` / ``rediss://`` / ``unix://``: one Redis server;
- ``cluster://host:port[,host:port...]``: Redis Cluster (startup nodes);
- ``sentinel://host:port[,host:port...]/master``: the master Sentinel names,
  followed across failovers;
- ``memory://[name]``: the embedded store (fakeredis with Lua), one per name
  and process."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from redis.asyncio import Connection, ConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.sentinel import Sentinel, SentinelManagedConnection

try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - hiredis is a declared dependency
    _hiredis_pack = None  # type: ignore[assignment]

from ..errors import ConfigError
from ..loops import forget_in_child, task_of

_MEMORY_SERVERS: dict[str, Any] = {}
SOCKET_TIMEOUT = 5.0


def is_memory_url(url: str) -> bool:
    return url.startswith("memory://")


def is_cluster(redis: object) -> bool:
    return isinstance(redis, RedisCluster)


def connect(url: str, **options: Any) -> Redis:
    """The client for ``url``. A cluster client is returned typed as Redis: the
    two share the command API leasequeue uses (scripts, pipelines, reads)."""
    if is_memory_url(url):
        return _memory_client(url)
    client_options(url, options)
    if url.startswith("cluster://"):
        cluster = _Cluster(startup_nodes=_nodes(url, "cluster://"), decode_responses=False,
                           **options)
        _loop_aware_nodes(cluster)
        forget_in_child(cluster)
        return cast(Redis, cluster)
    if url.startswith("sentinel://"):
        return _sentinel_client(url, options)
    if url.startswith("redis://"):
        options.setdefault("connection_class", HiredisPackConnection if _hiredis_pack is not None
                           else LoopAwareConnection)
    elif url.startswith("rediss://"):
        options.setdefault("connection_class", LoopAwareSSLConnection)
    elif url.startswith("unix://"):
        options.setdefault("connection_class", LoopAwareUnixConnection)
    pool = ConnectionPool.from_url(url, decode_responses=False, **options)
    # from_pool: the client owns the pool, so App.close() closes its connections
    # (Redis(connection_pool=pool) would leave them open until garbage collection)
    return Redis.from_pool(pool)


def client_options(url: str, options: dict[str, Any]) -> None:
    """The options every client of ``url`` gets (async and sync alike);
    ConfigError for a scheme leasequeue does not know."""
    options.setdefault("socket_connect_timeout", 5.0)
    # our own bound on every command (redis-py < 8 waits forever by default):
    # a connection that goes silent fails within it and is replaced; longer
    # than any blocking wait of an idle worker (claimer.IDLE_POLL)
    options.setdefault("socket_timeout", SOCKET_TIMEOUT)
    if not url.startswith("unix://"):  # (redis-py's Unix connections refuse the option)
        options.setdefault("socket_keepalive", True)
    # redis-py 8 caps a pool at 100 connections and raises past it; a worker
    # at concurrency 100 may settle 100 runs at once beside its claimer,
    # acker, starter, heartbeater and reaper
    options.setdefault("max_connections", 1024)
    if url.startswith(("cluster://", "sentinel://")):
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(
            f"unsupported URL {url!r}: use redis://, rediss://, unix://, cluster://, "
            "sentinel:// or memory://"
        )
    options.setdefault("health_check_interval", 15)


def host_ports(text: str, url: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bad host:port {part!r} in {url!r}")
        out.append((host, int(port)))
    return out


def _nodes(url: str, scheme: str) -> list[ClusterNode]:
    return [ClusterNode(h, p) for h, p in host_ports(url[len(scheme):].rstrip("/"), url)]


def sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str]:
    """(sentinel hosts, master name) of a sentinel:// URL."""
    hosts, _, master = url[len("sentinel://"):].partition("/")
    if not master:
        raise ConfigError(f"sentinel URL {url!r} needs the master name: sentinel://h:p/name")
    return host_ports(hosts, url), master


def _sentinel_client(url: str, options: dict[str, Any]) -> Redis:
    hosts, master = sentinel_parts(url)
    sentinel = _Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        hosts, socket_timeout=options["socket_connect_timeout"])
    forget_in_child(sentinel)
    for asked in sentinel.sentinels:  # (asked for the master's address at each connect)
        pool = asked.connection_pool  # (no connection made yet)
        pool.connection_class = _LOOP_AWARE.get(pool.connection_class, pool.connection_class)
    options.setdefault("connection_class", LoopAwareSentinelConnection)
    client: Redis = sentinel.master_for(master, redis_class=Redis, decode_responses=False,
                                        **options)
    return client


# a forked child's copy of its parent's connections: never closed there, nor
# finalized (closing one, or redis-py's finalizer doing it under the child's
# loop, would take its descriptor out of the epoll set the child shares with
# the parent, whose loop would no longer hear its replies)
KEPT_IN_CHILD: list[Any] = []


def forget_pool_in_child(pool: Any) -> None:
    """In a forked child: every connection of ``pool`` is the parent's
    socket, forgotten, never closed, and kept from the collector
    (KEPT_IN_CHILD); the child connects anew, on its own loop. The pool's
    lists are replaced as they are, not by its reset(), which records
    metrics (a fork hook runs no more than it must). The lanes' pools and
    Sentinel's pools to the sentinels (_Sentinel)."""
    available = getattr(pool, "_available_connections", None)
    in_use = getattr(pool, "_in_use_connections", None)
    if isinstance(available, list) and in_use is not None:
        KEPT_IN_CHILD.extend(available)
        KEPT_IN_CHILD.extend(in_use)
        pool._available_connections = []
        pool._in_use_connections = set()
    else:
        pool.reset()


class _Cluster(RedisCluster):
    """redis-py's cluster client, whose node connections a forked child
    does not use. No lane sends a cluster's scripts, so no lane's fork hook
    covered them: a child forked mid-step of a task (where its copy of that
    loop still names the task as current, so the connections looked of the
    loop running) wrote on its parent's sockets, and the two read each
    other's replies (found by a review, 2026-12-07)."""

    def _forget_in_child(self) -> None:
        """In a forked child: every node's connections, the parent's, are
        dropped, kept from the collector (KEPT_IN_CHILD), and each node
        connects anew."""
        manager = self.nodes_manager
        nodes = {id(node): node for node in (*self.startup_nodes,
                                             *manager.startup_nodes.values(),
                                             *manager.nodes_cache.values())}
        for node in nodes.values():
            KEPT_IN_CHILD.extend(node._connections)
            node._connections = []
            node._free.clear()


class _Sentinel(Sentinel):
    """redis-py's Sentinel, whose connections to the sentinels a forked
    child does not use (the master's are the lane's, which drops them at
    the fork): a child asked the sentinels for the master on its parent's
    sockets, and its finalizers took them out of the epoll set the two
    share (found by a review, 2026-12-07)."""

    def _forget_in_child(self) -> None:
        for asked in self.sentinels:
            forget_pool_in_child(asked.connection_pool)


def _loop_aware_nodes(cluster: RedisCluster) -> None:
    """The cluster client's node connections loop-aware (_OfTheLoopHere):
    redis-py's async cluster client takes no connection class, and makes
    each node's from the options it shares with its nodes manager (the same
    dict, read as each node is made), so the class is set there, and on
    the startup nodes it made already (no connection made yet)."""
    shared: dict[str, Any] = cluster.connection_kwargs
    made = shared.get("connection_class", Connection)
    shared["connection_class"] = _LOOP_AWARE.get(made, made)
    for node in cluster.startup_nodes:
        node.connection_class = shared["connection_class"]


class _OfTheLoopHere(AbstractConnection):
    """A connection that serves the event loop running here. redis-py's
    connections keep the stream of the loop they connected on: an App used
    again on a new loop (``asyncio.run`` twice) was handed, by its pool or
    a cluster node, connections of the closed loop, and each call failed
    with a bare ``RuntimeError: Event loop is closed`` (its close too).
    Here a connection whose stream is of a loop that closed, or of another
    loop than the one running here, is not connected: its connect and
    disconnect forget that stream (neither used nor closed: its transport
    is the old loop's), and redis-py connects it anew on this loop before
    its next command. The scripts' lane checks its own the
    same way (direct._here); forking is the lane's (direct.Lane)."""

    @property
    def is_connected(self) -> bool:
        reader = self._reader
        return reader is not None and self._writer is not None and not _elsewhere(reader)

    async def connect(self) -> None:
        self._forget_elsewhere()  # (Sentinel's connect reads _reader, not is_connected)
        await super().connect()  # type: ignore[no-untyped-call]

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._forget_elsewhere()
        await super().disconnect(*args, **kwargs)

    def _forget_elsewhere(self) -> None:
        """The stream of another loop forgotten, neither used nor closed:
        connect() then connects anew (a Sentinel connection asks the
        sentinels for the master again, where its connect, seeing a stream,
        returned at once and redis-py reconnected to the old loop's
        address), and a disconnect after a failed reconnect leaves the
        connection disconnected (it kept the old stream, and every later
        call failed on it; found by a review, 2026-12-07). Its finalizer
        closes it on its own loop, in this process: a forked child never
        holds its parent's (_Cluster, _Sentinel and the lane drop them at
        the fork)."""
        reader = self._reader
        if reader is not None and _elsewhere(reader):
            self._reader = None
            self._writer = None
            self._parser.on_disconnect()  # type: ignore[no-untyped-call]


def _elsewhere(reader: object) -> bool:
    """Whether a stream is of a loop that cannot serve a call here: closed,
    or another than the one running (not asked when a task of its own is
    stepping now, the common case: loops.task_of, no system call)."""
    loop: Any = getattr(reader, "_loop", None)
    if loop is None or task_of(loop) is not None:
        return False
    if loop.is_closed():
        return True
    running = asyncio._get_running_loop()
    return running is not None and running is not loop


class LoopAwareConnection(_OfTheLoopHere, Connection):
    """Connection, of the loop running here (_OfTheLoopHere)."""


class LoopAwareSSLConnection(_OfTheLoopHere, SSLConnection):
    """SSLConnection, of the loop running here (_OfTheLoopHere)."""


class LoopAwareUnixConnection(_OfTheLoopHere, UnixDomainSocketConnection):
    """UnixDomainSocketConnection, of the loop running here (_OfTheLoopHere)."""


class LoopAwareSentinelConnection(_OfTheLoopHere, SentinelManagedConnection):
    """SentinelManagedConnection, of the loop running here (_OfTheLoopHere)."""


_LOOP_AWARE: dict[type, type] = {Connection: LoopAwareConnection,
                                 SSLConnection: LoopAwareSSLConnection,
                                 UnixDomainSocketConnection: LoopAwareUnixConnection}


class HiredisPackConnection(_OfTheLoopHere, Connection):
    """Packs commands with hiredis (C) instead of redis-py's Python packer,
    which the asyncio client always uses (the sync client already picks
    hiredis). Measured: 13 us less per script call, ~1 us less per argument
    of a batched ack. Anything hiredis cannot pack goes the usual way. Of
    the loop running here (_OfTheLoopHere)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str) and " " in first:  # "SCRIPT LOAD" is two words
            args = (*first.split(), *args[1:])
        try:
            return [_hiredis_pack(args)]
        except TypeError:
            return super().pack_command(*args)


def memory_server(url: str) -> Any:
    """The fakeredis server of a memory:// URL: one per name and process,
    shared by the async and the sync client."""
    try:
        import fakeredis
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "memory:// needs fakeredis with Lua: pip install 'leasequeue[embedded]'"
        ) from exc
    name = url[len("memory://"):] or "default"
    server = _MEMORY_SERVERS.get(name)
    if server is None:
        server = fakeredis.FakeServer()
        _MEMORY_SERVERS[name] = server
    return server


def _memory_client(url: str) -> Redis:
    import fakeredis

    client: Redis = fakeredis.FakeAsyncRedis(server=memory_server(url))
    return client


async def close_client(redis: Redis) -> None:
    """Close a client from connect(): its pool, and for a Sentinel URL also the
    clients it keeps to the sentinels themselves (redis-py leaves them open)."""
    pool: Any = getattr(redis, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    await redis.aclose()
    for sentinel in getattr(manager, "sentinels", []):
        await sentinel.aclose()

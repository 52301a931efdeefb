"""The producer's scripts on redis-py's synchronous client, for code that has
no event loop (WSGI, Django, Flask, scripts): the client for a URL, and typed
calls of the scripts a producer needs (enqueue, queue_config, watch, stats).

The same Lua files, argument lists and reply decoding as the async path
(scripts.py); only the transport differs. It never runs a worker's scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import Sentinel

from ..errors import NotDurable
from ..models import NewJob, QueueStats
from .connection import client_options, host_ports, is_memory_url, memory_server, sentinel_parts
from .keys import CACHED_QUEUES, QueueKeys
from .loader import script_source
from .record import text
from .scripts import (
    OneJobCalls,
    enqueue_args,
    enqueue_replies,
    queue_config_reply,
    stats_reply,
)
from .settings import StoreSettings
from .specs import SPECS
from .sync_lane import SyncLane, load_script
from .translate import redis_errors, reraise

# what a producer runs; a worker's scripts stay on the async client
PRODUCER_SCRIPTS = ("enqueue", "enqueue_one", "queue_config", "watch", "stats")


def connect_sync(url: str, **options: Any) -> redis.Redis:
    """The synchronous client for ``url`` (same schemes and options as the
    async one; a cluster client is returned typed as Redis)."""
    if is_memory_url(url):
        import fakeredis

        client: redis.Redis = fakeredis.FakeRedis(server=memory_server(url))
        return client
    client_options(url, options)
    if url.startswith("cluster://"):
        hosts = host_ports(url[len("cluster://"):].rstrip("/"), url)
        node: Any = ClusterNode
        nodes = [node(h, p) for h, p in hosts]
        return cast(redis.Redis, RedisCluster(startup_nodes=nodes, decode_responses=False,
                                              **options))
    if url.startswith("sentinel://"):
        hosts, master = sentinel_parts(url)
        sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            hosts, socket_timeout=options["socket_connect_timeout"])
        master_for: Any = sentinel.master_for
        return cast(redis.Redis, master_for(master, redis_class=redis.Redis,
                                            decode_responses=False, **options))
    return redis.Redis.from_url(url, decode_responses=False, **options)


class SyncScripts:
    """The producer's scripts for one synchronous client."""

    def __init__(self, client: redis.Redis, url: str, settings: StoreSettings) -> None:
        self._url = url
        self._redis = client
        self.settings = settings
        shebang = not is_memory_url(url)
        # one Redis or Sentinel: EVALSHA on connections the lane keeps (and
        # on one Redis, written and read on their sockets: sync_lane.py)
        self._lane = (SyncLane(client, settings.reply_spin_us)
                      if shebang and not isinstance(client, RedisCluster) else None)
        self._scripts: dict[str, Script] = {
            name: client.register_script(script_source(name, shebang))
            for name in PRODUCER_SCRIPTS}
        self._key_cache: dict[QueueKeys, dict[str, list[bytes]]] = {}  # by queue, then script
        self._one_job = OneJobCalls(self._scripts["enqueue"].sha,
                                    self._scripts["enqueue_one"].sha)

    def _keys_of(self, name: str, qk: QueueKeys) -> list[bytes]:
        by_script = self._key_cache.get(qk)
        if by_script is None:
            if len(self._key_cache) >= CACHED_QUEUES:  # ever new queues: start again
                self._key_cache.clear()
            by_script = self._key_cache[qk] = {}
        cached = by_script.get(name)
        if cached is None:
            cached = by_script[name] = [getattr(qk, k).encode() for k in SPECS[name].keys]
        return cached

    def run(self, name: str, qk: QueueKeys, args: Sequence[Any]) -> Any:
        keys = self._keys_of(name, qk)
        with redis_errors(self._url, name, keys):
            if self._lane is not None:
                return self._lane.run(self._scripts[name], keys, args)
            return self._scripts[name](keys=keys, args=list(args))

    def enqueue(self, qk: QueueKeys, jobs: Sequence[NewJob]) -> list[tuple[bool, str]]:
        s = self.settings
        if s.durable_replicas <= 0:
            if len(jobs) == 1 and self._lane is not None:  # one per call: onto a head
                call = self._one_job.call(s, qk, jobs[0], self._keys_of)
                while call is not None:
                    packed, keys, name = call
                    try:
                        reply = self._lane.run(self._scripts[name], keys, (), packed)
                    except Exception as exc:  # redis_errors' rule, free when nothing fails
                        reraise(self._url, name, exc, keys)
                    if reply.__class__ is not int or name != "enqueue_one":  # (ends the loop)
                        return enqueue_replies(reply, 1)
                    # enqueue_one.lua found the id: enqueue.lua answers its state
                    call = self._one_job.call(s, qk, jobs[0], self._keys_of, line=False)
            return enqueue_replies(self.run("enqueue", qk, enqueue_args(s, jobs)), len(jobs))
        args = enqueue_args(s, jobs)
        with redis_errors(self._url, "enqueue"):
            reply, acked = _run_on_pool(self._pool_owner(qk), self._scripts["enqueue"],
                                        self._keys_of("enqueue", qk), args,
                                        (s.durable_replicas, s.durable_timeout_ms))
        if acked < s.durable_replicas:
            raise NotDurable("enqueue", acked, s.durable_replicas, reply)
        return enqueue_replies(reply, len(jobs))

    def _pool_owner(self, qk: QueueKeys) -> redis.Redis:
        """The client whose pool reaches the master of ``qk`` (WAIT counts the
        replicas of its own connection's writes, so both go on one)."""
        if isinstance(self._redis, RedisCluster):
            node = self._redis.get_node_from_key(qk.jobs)
            return cast(redis.Redis, node.redis_connection)
        return self._redis

    def queue_config(self, qk: QueueKeys, shards: int, expected: int = 0) -> int:
        return queue_config_reply(qk, self.run("queue_config", qk, [shards, expected]))

    def watch(self, qk: QueueKeys, job_id: str, ttl_ms: int) -> str:
        return text(self.run("watch", qk, [job_id, ttl_ms]))

    def stats(self, qk: QueueKeys, max_classes: int = 32) -> QueueStats:
        return stats_reply(qk, self.run("stats", qk, [max_classes]))


def _run_on_pool(client: redis.Redis, script: Script, keys: Sequence[bytes],
                 args: Sequence[Any], wait: tuple[int, int] | None = None) -> tuple[Any, int]:
    """EVALSHA on one pooled connection (reloaded on NOSCRIPT, a dropped
    connection retried once: a producer's scripts are idempotent or
    deduplicated), then WAIT on the same connection when ``wait`` =
    (replicas, timeout ms) is given. Returns (reply, replicas that acked).
    Measured against the client's own EVALSHA in benchmarks/sync_enqueue.py."""
    pool: Any = client.connection_pool
    for attempt in (1, 2):
        conn = pool.get_connection()
        try:
            try:
                reply = _evalsha(conn, script, keys, args)
            except NoScriptError:
                load_script(conn, script)
                reply = _evalsha(conn, script, keys, args)
            if wait is None:
                return reply, 0
            conn.send_command("WAIT", *wait)
            return reply, int(conn.read_response())
        except (RedisConnectionError, RedisTimeoutError):
            conn.disconnect()
            if attempt == 2:
                raise
        finally:
            pool.release(conn)
    raise AssertionError("unreachable")


def _evalsha(conn: Any, script: Script, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
    conn.send_command("EVALSHA", script.sha, len(keys), *keys, *args)
    return conn.read_response()

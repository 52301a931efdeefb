"""Runs scripts on one pooled connection, sending EVALSHA and reading the
reply directly.

- ``run_direct``: the hot path on one Redis. redis-py's per-command machinery
  (retry wrapper, pool bookkeeping, response callbacks) cost about 40 us a
  call on top of the round trip; this path keeps the pool and its health
  checks, reloads on NOSCRIPT, and retries once on a dropped connection.
- ``run_and_wait``: the opt-in durable mode, a script then WAIT on the same
  connection (WAIT counts the replicas that have the writes of its own
  connection). Replication is asynchronous; without it a failover can lose
  writes the old master acknowledged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, SlotNotCoveredError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection import is_cluster
from .translate import TOPOLOGY_ERRORS


async def run_direct(redis: Redis, script: AsyncScript, keys: Sequence[bytes],
                     args: Sequence[Any], retry: bool = True, read_only: bool = False) -> Any:
    """EVALSHA on a pooled connection (one Redis or a Sentinel master). With
    ``retry``, a dropped connection (a Redis restart) is retried once;
    ``read_only`` sends EVALSHA_RO (a no-writes script)."""
    pool: Any = redis.connection_pool
    command = "EVALSHA_RO" if read_only else "EVALSHA"
    for attempt in (1, 2):
        conn = await pool.get_connection()
        try:
            try:
                return await _evalsha(conn, script.sha, keys, args, command)
            except NoScriptError:
                await _load(conn, script)
                return await _evalsha(conn, script.sha, keys, args, command)
        except (RedisConnectionError, RedisTimeoutError):
            await conn.disconnect()  # a stale connection (Redis restarted): one retry
            if attempt == 2 or not retry:
                raise
        finally:
            await pool.release(conn)
    raise AssertionError("unreachable")


async def run_and_wait(redis: Redis, script: AsyncScript, keys: Sequence[bytes],
                       args: Sequence[Any], replicas: int, timeout_ms: int) -> tuple[Any, int]:
    """The script's reply and how many replicas acknowledged its writes."""
    if is_cluster(redis):
        cluster: Any = redis
        await cluster.initialize()  # a no-op once the slot map is loaded
        try:
            node = cluster.get_node_from_key(keys[0])
            conn = node.acquire_connection()
        except SlotNotCoveredError:
            await cluster.nodes_manager.initialize()
            raise
        try:
            return await _on(conn, script, keys, args, replicas, timeout_ms)
        except (*TOPOLOGY_ERRORS, RedisConnectionError, RedisTimeoutError):
            # a failover: this path bypasses the client's own MOVED handling,
            # so it must learn the new masters itself
            await conn.disconnect()
            await cluster.nodes_manager.initialize()
            raise
        finally:
            node.release(conn)
    pool: Any = redis.connection_pool
    conn = await pool.get_connection()
    try:
        return await _on(conn, script, keys, args, replicas, timeout_ms)
    finally:
        await pool.release(conn)


async def _on(conn: Any, script: AsyncScript, keys: Sequence[bytes], args: Sequence[Any],
              replicas: int, timeout_ms: int) -> tuple[Any, int]:
    try:
        reply = await _evalsha(conn, script.sha, keys, args)
    except NoScriptError:
        await _load(conn, script)
        reply = await _evalsha(conn, script.sha, keys, args)
    await conn.send_command("WAIT", replicas, timeout_ms)
    acked = int(await conn.read_response())
    return reply, acked


async def _evalsha(conn: Any, sha: str, keys: Sequence[bytes], args: Sequence[Any],
                   command: str = "EVALSHA") -> Any:
    await conn.send_command(command, sha, len(keys), *keys, *args)
    return await conn.read_response()


async def _load(conn: Any, script: AsyncScript) -> None:
    await conn.send_command("SCRIPT", "LOAD", script.script)
    await conn.read_response()

"""Turns a URL into an async Redis client: redis:// and rediss:// (real
server) or memory:// (embedded fakeredis with Lua, one store per name and
process). It never runs scripts."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from .errors import ConfigError

_MEMORY_SERVERS: dict[str, Any] = {}


def is_memory_url(url: str) -> bool:
    return url.startswith("memory://")


def connect(url: str, **options: Any) -> Redis:
    if is_memory_url(url):
        return _memory_client(url)
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"unsupported URL {url!r}: use redis://, rediss://, unix:// or memory://")
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("health_check_interval", 15)
    client: Redis = Redis.from_url(url, decode_responses=False, **options)
    return client


def _memory_client(url: str) -> Redis:
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
    client: Redis = fakeredis.FakeAsyncRedis(server=server)
    return client


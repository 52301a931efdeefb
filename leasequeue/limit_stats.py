"""The current state of every limit an App declares (queue limits,
max_concurrent, rate limits), for ``App.limit_stats`` and ``leasequeue
stats --limits``. Reads only: a rate is looked at with rate.lua's ``peek``,
a concurrency limit with ZCARD (after its lapsed holders are counted out)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .limiter import RedisLimiter
from .rate import Rate
from .runtime.limits import job_limit_name, queue_limit_name
from .runtime.rates import job_rate_name, queue_rate_name
from .store.keys import check_limit_key, keyed_limit_name, limit_keys
from .store.translate import redis_errors

if TYPE_CHECKING:
    from .app import App


async def limit_stats(app: App, key: str | None = None) -> list[dict[str, Any]]:
    """One dict per declared limit. A keyed limit (a ``key`` template) has a
    budget per key; give ``key`` (a rendered key, e.g. "stripe:acct_1") to
    see that key's state, else its template is listed alone."""
    if key is not None:
        check_limit_key(key)
    out: list[dict[str, Any]] = []
    for queue, limit in sorted(app.queue_limits.items()):
        out.append(await _concurrency(app, queue_limit_name(queue), limit))
    seen: set[str] = set()
    for queue, rate in sorted(app.queue_rates.items()):
        out.append(await _rate(app, queue_rate_name(queue), rate, key))
    for d in app.registry.all():
        if d.max_concurrent is not None:
            if d.concurrency_key is None:
                out.append(await _concurrency(app, job_limit_name(d.name), d.max_concurrent))
            else:
                entry: dict[str, Any] = {"limit": f"job {d.name}", "kind": "concurrency",
                                         "max": d.max_concurrent,
                                         "per_key": d.concurrency_key.text}
                if key is not None:
                    state = await _concurrency(app, keyed_limit_name(key), d.max_concurrent)
                    entry.update(key=key, holding=state["holding"])
                out.append(entry)
        for rate in d.rate:
            name = rate.name or job_rate_name(d.name)
            if name not in seen:
                seen.add(name)
                out.append(await _rate(app, name, rate, key))
    return out


async def _concurrency(app: App, name: str, limit: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"limit": name, "kind": "concurrency", "max": limit}
    if not isinstance(app.limiter, RedisLimiter):
        entry["holding"] = "counted in each worker process (in-process limiter)"
        return entry
    prefix = app.limiter.prefix or f"{app.prefix}:limiter"
    keys = limit_keys(prefix, name)
    with redis_errors(app.url, "limit_stats"):
        entry["holding"] = int(await app.redis.zcard(keys.limit))
    return entry


async def _rate(app: App, name: str, rate: Rate, key: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"limit": f"rate.{name}", "kind": "rate", "rate": rate.describe()}
    if rate.limit_key is not None:
        entry["per_key"] = rate.limit_key.text
        if key is None:
            return entry
        entry["key"] = key
    answer = await app.limiter.rates.call(name, key if rate.limit_key else None, [],
                                          rate.interval_us, rate.tolerance_us, "peek")
    entry.update(starts_allowed_now=answer.tokens, waiting=answer.reserved,
                 next_start_in_ms=round(answer.answers[0][1] / 1000, 1))
    return entry

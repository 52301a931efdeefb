"""An App for the resilience-kit tests run in worker processes (breakers and
the resource ledger). Env: LQ_URL, LQ_PREFIX, LQ_COOLDOWN (s), LQ_TTL (s).

- ``charge``: needs the breaker ``payments-api``; fails with TransientError
  while the key ``<prefix>:test:down`` exists. Every start is recorded on the
  server clock: ``<job id> <token> <worker> <server us>``.
- ``hold``: opens a ``tmpdir`` resource (a directory under the path in its
  payload) through ``ctx.resource`` and holds it ``seconds``.
- the ``tmpdir`` close renames the directory away (atomic: of racing closes
  only one moves it) and records each close and whether it had an effect."""

from __future__ import annotations

import os
import uuid

import anyio

from leasequeue import App, Context, TransientError

app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"))
STARTS = f"{app.prefix}:test:starts"
DOWN = f"{app.prefix}:test:down"
CLOSES = f"{app.prefix}:test:closes"
OPENS = f"{app.prefix}:test:opens"

payments = app.breaker("payments-api", failures=50, window=60,
                       cooldown=float(os.environ.get("LQ_COOLDOWN", "1.0")),
                       max_cooldown=2 * float(os.environ.get("LQ_COOLDOWN", "1.0")))


async def now_us() -> int:
    sec, usec = await app.redis.time()
    return int(sec) * 1_000_000 + int(usec)


@app.job(breakers=[payments], max_attempts=1, max_infra_attempts=10_000,
         infra_backoff=lambda n: 0.05)
async def charge(ctx: Context) -> None:
    await app.redis.rpush(STARTS, f"{ctx.job_id} {ctx.token} {ctx.worker_id} {await now_us()}")
    if await app.redis.exists(DOWN):
        await anyio.sleep(0.02)
        raise TransientError("payments-api is down")


async def close_tmpdir(key: str) -> None:
    try:
        os.rename(key, f"{key}.closed.{uuid.uuid4().hex[:8]}")
        effect = "effect"
    except FileNotFoundError:
        effect = "none"
    await app.redis.rpush(CLOSES, f"{key} {effect} {os.getpid()} {await now_us()}")


app.resource_kind("tmpdir", close=close_tmpdir, ttl=float(os.environ.get("LQ_TTL", "3600")))


def make_dir(key: str) -> str:
    os.makedirs(key)
    return key


@app.job(max_attempts=1, timeout=None)
async def hold(ctx: Context, path: str, seconds: float) -> None:
    async with ctx.resource("tmpdir", path, open=make_dir) as opened:
        await app.redis.rpush(OPENS, f"{opened} {ctx.job_id} {ctx.token} {ctx.worker_id} "
                                     f"{await now_us()}")
        await anyio.sleep(seconds)

"""An App for the resilience-kit crash tests (checkpoints and sagas in worker
processes killed with SIGKILL). URL and prefix come from the environment.
Every side effect is recorded in Redis: a LIST of calls (what ran, how often)
and SETs keyed idempotently (what is applied, in effect)."""

from __future__ import annotations

import os
from typing import Any

import anyio

from leasequeue import App, Context, Step, fixed, run_saga

app = App(os.environ.get("LQ_URL", "redis://127.0.0.1:6379/0"),
          prefix=os.environ.get("LQ_PREFIX", "lqtest"))
CALLS = f"{app.prefix}:test:calls"  # LIST: "<job> <what> <token>" per call


def applied_key(job_id: str) -> str:
    """SET of the steps whose effect is applied (SADD on do, SREM on undo)."""
    return f"{app.prefix}:test:applied:{job_id}"


def undone_key(job_id: str) -> str:
    """SET of the steps whose compensation took effect."""
    return f"{app.prefix}:test:undone:{job_id}"


async def call(ctx: Context, what: str) -> None:
    await app.redis.rpush(CALLS, f"{ctx.job_id} {what} {ctx.token}")


@app.job(max_attempts=5, backoff=fixed(0))
async def phases(ctx: Context) -> dict[str, Any]:
    """Three phases, each committed with a checkpoint; the first run hangs
    after phase 2 (the test kills it there)."""
    seen = await ctx.checkpoints()
    await call(ctx, f"seen:{','.join(sorted(seen)) or '-'}")
    for n in (1, 2, 3):
        name = f"phase{n}"
        if name in seen:
            continue
        await call(ctx, name)  # the phase's work
        await ctx.checkpoint(name, {"sha": f"sha-{n}", "token": ctx.token})
        await call(ctx, f"checkpointed:{name}")
        if n == 2 and ctx.attempt == 1:
            await anyio.sleep(120)  # killed here
    return await ctx.checkpoints()


def saga_steps(ctx: Context, mode: str) -> list[Step]:
    """charge (hard to undo: first), reserve, ship. mode:
    kill-in-ship: the first run hangs in ship's do (killed there);
    fail-ship-kill-in-undo: ship always fails; the first run hangs in
    charge's undo (killed mid-compensation)."""
    applied, undone = applied_key(ctx.job_id), undone_key(ctx.job_id)

    def step(name: str) -> Step:
        async def do(results: dict[str, Any]) -> str:
            await call(ctx, f"{name}.do")
            if name == "ship" and mode == "kill-in-ship" and ctx.attempt == 1:
                await anyio.sleep(120)
            if name == "ship" and mode == "fail-ship-kill-in-undo":
                raise RuntimeError("carrier refused the parcel")
            await app.redis.sadd(applied, name)  # idempotent: keyed by job and step
            return f"{name}-id-{ctx.job_id}"

        async def undo(result: str) -> None:
            await call(ctx, f"{name}.undo")
            if name == "charge" and mode == "fail-ship-kill-in-undo" and ctx.attempt == 1:
                await anyio.sleep(120)
            await app.redis.srem(applied, name)
            await app.redis.sadd(undone, name)

        return Step(name, do, undo)

    return [step("charge"), step("reserve"), step("ship")]


@app.job(max_attempts=5, backoff=fixed(0))
async def order(ctx: Context, mode: str) -> dict[str, Any]:
    return await run_saga(ctx, saga_steps(ctx, mode))

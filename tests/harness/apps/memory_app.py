"""An App built with memory:// (as a newcomer's first try would be): the CLI
worker must be pointed at a real Redis with --url or LEASEQUEUE_URL."""

from __future__ import annotations

import asyncio
import os

from leasequeue import App, Context

app = App("memory://", prefix=os.environ.get("LQ_PREFIX", "lqtest"))


@app.job
async def hello(ctx: Context, name: str) -> str:
    return f"hello {name} from {ctx.worker_id}"


@app.job
async def which_loop(ctx: Context) -> str:
    """The module of the running event loop's class (tests/test_loops.py)."""
    return type(asyncio.get_running_loop()).__module__

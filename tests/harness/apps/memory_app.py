"""An App built with memory:// (as a newcomer's first try would be): the CLI
worker must be pointed at a real Redis with --url or LEASEQUEUE_URL."""

from __future__ import annotations

import os

from leasequeue import App, Context

app = App("memory://", prefix=os.environ.get("LQ_PREFIX", "lqtest"))


@app.job
async def hello(ctx: Context, name: str) -> str:
    return f"hello {name} from {ctx.worker_id}"

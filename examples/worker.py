"""Run a worker for the examples' jobs (SIGTERM / Ctrl-C stops it gracefully):

    python examples/worker.py
    # the same from the command line:
    cd examples && leasequeue worker tasks:app --concurrency 8
"""

from __future__ import annotations

import anyio
from tasks import app

import leasequeue as lq


async def main() -> None:
    await lq.Worker(app, concurrency=8, handle_signals=True).run()
    await app.close()


if __name__ == "__main__":
    anyio.run(main)

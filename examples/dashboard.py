"""The web dashboard over the examples' queues (needs `pip install
'leasequeue[dashboard]'`). Read-only unless LEASEQUEUE_DASHBOARD_TOKEN is set.

    python examples/dashboard.py            # http://127.0.0.1:8080/ until Ctrl-C
    python examples/dashboard.py --smoke    # serve on a free port, fetch the queues page, stop
    # the same from the command line:
    leasequeue dashboard --app tasks:app    # (from this folder)
"""

from __future__ import annotations

import socket
import sys
import urllib.request

import anyio
import uvicorn
from tasks import app

from leasequeue.dashboard.server import DashboardConfig, create_app


async def main(smoke: bool) -> None:
    await app.enqueue("send_welcome", {"user": "dora"}, job_id="welcome:dora")
    port = 8080
    if smoke:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    asgi = create_app(DashboardConfig(url=app.url, prefix=app.prefix), app)
    server = uvicorn.Server(uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        if smoke:
            while not server.started:  # noqa: ASYNC110 (uvicorn has no started event)
                await anyio.sleep(0.05)
            url = f"http://127.0.0.1:{port}/queues"
            page = await anyio.to_thread.run_sync(lambda: urllib.request.urlopen(url).read())
            print(f"GET /queues: {len(page)} bytes, emails listed: {b'emails' in page}")
            server.should_exit = True
    await app.close()


if __name__ == "__main__":
    anyio.run(main, "--smoke" in sys.argv)

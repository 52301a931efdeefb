"""A saga (tasks.py: place_order): an order whose carrier is up completes;
one whose carrier refuses is compensated in reverse (stock released, charge
refunded) and ends dead with reason saga-compensated.

    python examples/saga.py --smoke   # with a worker process of its own
"""

from __future__ import annotations

import json
import sys

import anyio
from tasks import app

import leasequeue as lq


async def main(smoke: bool) -> None:
    ok = await app.enqueue("place_order", {"order": "o-1", "carrier_up": True})
    refused = await app.enqueue("place_order", {"order": "o-2", "carrier_up": False})
    if smoke:
        from smoke import worker_process

        with worker_process():
            await app.wait(ok.id, timeout=60)
            try:
                await app.wait(refused.id, timeout=60)
            except lq.JobDead:
                pass
    for job in (ok, refused):
        record = await app.get_job(job.id, "orders")
        shop = await app.redis.hgetall(f"{app.prefix}:examples:shop:{job.id}")
        print(json.dumps({"order": record.payload["order"], "state": record.state,
                          "reason": record.reason,
                          "effects": {k.decode(): v.decode() for k, v in sorted(shop.items())}}))
    await app.close()


if __name__ == "__main__":
    anyio.run(main, "--smoke" in sys.argv)

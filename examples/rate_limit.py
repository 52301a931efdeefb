"""A rate per tenant (tasks.py: sync_account, 5 a second per account, no
burst): ten jobs of one account start about 0.2 s apart, while another
account's jobs are not held back by them.

    python examples/rate_limit.py --smoke   # with a worker process of its own
"""

from __future__ import annotations

import sys
import time

import anyio
from tasks import app

import leasequeue as lq


async def main(smoke: bool) -> None:
    started = time.monotonic()
    jobs = await app.enqueue_many(
        [lq.JobRequest("sync_account", {"account": "acme", "page": p}) for p in range(10)]
        + [lq.JobRequest("sync_account", {"account": "globex", "page": 0})])
    if smoke:
        from smoke import worker_process

        with worker_process():
            for job in jobs:
                await app.wait(job.id, timeout=60)
    ends = {}
    for job in jobs:
        record = await app.get_job(job.id, "partner")
        ends[job.id] = (record.payload["account"], record.finished_ms or 0, record.attempt)
    acme = sorted(end for account, end, _ in ends.values() if account == "acme")
    spread = (acme[-1] - acme[0]) / 1000
    print(f"acme: 10 jobs finished over {spread:.1f}s (5 a second: at least 1.8s), "
          f"each on attempt {max(a for _, _, a in ends.values())}")
    print(f"all done in {time.monotonic() - started:.1f}s")
    await app.close()


if __name__ == "__main__":
    anyio.run(main, "--smoke" in sys.argv)

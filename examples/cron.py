"""Schedules: declared next to the jobs (tasks.py), recorded in Redis by
every worker's boot (or here), fired by the workers with no leader.

    python examples/cron.py              # record them, list them with their next fire
    python examples/cron.py --smoke      # also run one now and wait for its result
    leasequeue schedules list --prefix examples
"""

from __future__ import annotations

import json
import sys

import anyio
from tasks import app


async def main(smoke: bool) -> None:
    await app.schedules.record()  # a worker's boot does the same
    now, records = await app.schedules.list()
    for record in records:
        print(json.dumps(record.describe(now)))
    if smoke:
        from smoke import worker_process

        with worker_process():
            job = await app.schedules.trigger("hourly-cleanup")  # "run now"
            print(f"triggered {job.id}: result {await app.wait(job.id, timeout=30)}")
    await app.close()


if __name__ == "__main__":
    anyio.run(main, "--smoke" in sys.argv)

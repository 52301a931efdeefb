"""A claimer process for test_one_holder: N concurrent async claimers that
claim small random batches until the queue is empty and record every claim.

Run as ``python -m tests.harness.claimer_proc URL PREFIX QUEUE PROC_ID ...``. It reports
ready (RPUSH), then waits on a start barrier (BLPOP on a go list) so every
process starts at once; it never sleeps: an empty claim means the queue is
drained (nothing is scheduled and no lease can expire during the run).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid

import anyio

from leasequeue import App

# exit codes the test reads
NO_GO = 2  # the start barrier never opened
OVERRAN = 3  # the queue was not drained before the deadline


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("prefix")
    p.add_argument("queue")
    p.add_argument("proc_id")
    p.add_argument("--claimers", type=int, default=8)
    p.add_argument("--ready-key", required=True, help="list this process reports ready on")
    p.add_argument("--go-key", required=True, help="start barrier: a list the parent pushes to")
    p.add_argument("--out-key", required=True, help="list every claim is RPUSHed to")
    p.add_argument("--lease-ms", type=int, default=600_000)
    p.add_argument("--timeout", type=float, default=60.0)
    return p.parse_args(argv)


async def claimer(app: App, args: argparse.Namespace, worker_id: str, deadline: float) -> int:
    """Claim until an empty batch; RPUSH 'id token worker' per job. Returns jobs claimed."""
    rng = random.Random(worker_id)
    qk = app.keys(args.queue)
    claimed = 0
    while time.monotonic() < deadline:
        batch = await app.scripts.claim(qk, rng.randint(1, 20), args.lease_ms, worker_id,
                                        1_000_000, uuid.uuid4().hex)
        if not batch.jobs:
            return claimed
        claimed += len(batch.jobs)
        await app.redis.rpush(args.out_key, *[f"{j.id} {j.token} {worker_id}"
                                              for j in batch.jobs])
    raise TimeoutError(f"{worker_id}: queue not drained before the deadline")


async def main(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    async with App(args.url, prefix=args.prefix) as app:
        # warm up: connect and load the claim script (count 0 leases nothing)
        await app.scripts.claim(app.keys(args.queue), 0, args.lease_ms, "warmup", 0,
                                uuid.uuid4().hex)
        await app.redis.rpush(args.ready_key, args.proc_id)
        if await app.redis.blpop([args.go_key], timeout=args.timeout) is None:
            return NO_GO
        counts: list[int] = []

        async def run(worker_id: str) -> None:
            counts.append(await claimer(app, args, worker_id, deadline))

        overran = False
        try:
            async with anyio.create_task_group() as tg:
                for i in range(args.claimers):
                    tg.start_soon(run, f"{args.proc_id}-c{i}")
        except* TimeoutError:
            overran = True
        if overran:
            return OVERRAN
        print(f"{args.proc_id} claimed {sum(counts)}")
        return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse(sys.argv[1:]), backend="asyncio"))

"""What one enqueue call's job costs the client before anything is sent:
the JobRequest and Producer.prepare that App.enqueue and SyncApp.enqueue
made before 2026-12-04, against Producer.one (the default shape from a
cache, no JobRequest) since, and the parts of each: shape() and
default_shape(), make(), a job id (one os.urandom read), the envelope.
Micro-benchmarks (timeit, medians of 5) on this tree's package, a no-op
job with no payload; run with PYTHONPATH=<tree> to measure another commit
(the rows whose functions it lacks are left out).

Run: python benchmarks/one_cost.py
     PYTHONPATH=<worktree at another commit> python benchmarks/one_cost.py
"""

from __future__ import annotations

import os
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leasequeue import App, codec
from leasequeue.producer import JobRequest, new_job_id

N = 200_000


def per_call_us(fn: Callable[[], Any], n: int = N) -> float:
    """Median of 5 timings of ``n`` calls, in µs per call."""
    return statistics.median(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main() -> None:
    app = App("memory://one-cost", prefix="one-cost")

    async def noop() -> None: ...

    app.job(noop)
    producer = app.producer
    request = JobRequest("noop")
    rows: dict[str, Callable[[], Any]] = {
        "JobRequest('noop')": lambda: JobRequest("noop"),
        "shape(request)": lambda: producer.shape(request),
        "JobRequest + prepare() (App.enqueue's job before)": lambda: producer.prepare(
            JobRequest("noop")),
        "new_job_id() (os.urandom(14).hex())": new_job_id,
        "codec.encode_envelope(None, ...)": lambda: codec.encode_envelope(
            None, "", "", producer.max_payload_bytes, headers=None),
    }
    if hasattr(producer, "one"):
        from leasequeue.producer import NO_DELAY, NO_PRIORITY

        shape = producer.default_shape("noop", None)
        rows |= {
            "default_shape('noop', None)": lambda: producer.default_shape("noop", None),
            "make(..., shape)": lambda: producer.make("noop", None, None, None, None, shape,
                                                      None, "", NO_DELAY),
            "one(defaults) (App.enqueue's job since)": lambda: producer.one(
                "noop", None, None, None, NO_DELAY, NO_PRIORITY, None, None, None, None, None),
            "one(delay=0.5) (a shape checked)": lambda: producer.one(
                "noop", None, None, None, 0.5, NO_PRIORITY, None, None, None, None, None),
        }
    print(f"one enqueue call's job, client µs per call (timeit, {N:,} calls, median of 5), "
          f"Python {sys.version.split()[0]}")
    for label, fn in rows.items():
        print(f"  {label:52s} {per_call_us(fn):6.3f}")


if __name__ == "__main__":
    main()

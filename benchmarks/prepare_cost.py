"""What Producer.prepare costs per no-op job (the client's share of every
enqueue), and the choices inside it that 2026-12-01 changed: a job id from
uuid.uuid4().hex or os.urandom(16).hex(), a frozen or plain dataclass for
NewJob (a named tuple built by tuple.__new__ since 2026-12-03), a batch's
ids from one read of os.urandom, and a batch's prepare_many per job (each
request's shape checked once per run of alike requests since 2026-12-03).
Micro-benchmarks on
this tree's package (run it with PYTHONPATH=<tree> to measure another
commit's prepare).

Run: python benchmarks/prepare_cost.py > benchmarks/results/prepare_cost.txt
     PYTHONPATH=<worktree at another commit> python benchmarks/prepare_cost.py
"""

from __future__ import annotations

import os
import statistics
import sys
import timeit
import uuid
from dataclasses import MISSING, field, fields, make_dataclass
from pathlib import Path
from typing import Any

if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from leasequeue import App, JobRequest
from leasequeue.models import NewJob

N = 50_000
BATCH = 20_000  # the bulk column's batch


def per_call_us(fn: object, n: int = N) -> float:
    """Median of 5 timings of ``n`` calls, in µs per call."""
    return statistics.median(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6  # type: ignore[arg-type]


def newjob_fields() -> list[tuple[str, Any, Any]]:
    """NewJob's (name, type, default or MISSING): a named tuple since
    2026-12-03, a slots dataclass in the trees before."""
    if hasattr(NewJob, "_fields"):
        defaults = NewJob._field_defaults
        return [(name, NewJob.__annotations__[name], defaults.get(name, MISSING))
                for name in NewJob._fields]
    return [(f.name, f.type, f.default) for f in fields(NewJob)]  # type: ignore[arg-type]


def newjob_shaped(frozen: bool) -> type:
    """A slots dataclass with NewJob's fields and defaults, frozen or not."""
    spec = [(name, kind) if default is MISSING else (name, kind, field(default=default))
            for name, kind, default in newjob_fields()]
    return make_dataclass("FrozenNewJob" if frozen else "PlainNewJob", spec, frozen=frozen,
                          slots=True)


def main() -> None:
    app = App("memory://prepare-cost", prefix="prepare-cost")

    @app.job()
    async def noop() -> None: ...

    request = JobRequest("noop")
    import leasequeue
    print(f"leasequeue from {Path(leasequeue.__file__).parent.parent}, Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}; medians of 5 x {N:,} calls")
    prepare = per_call_us(lambda: app.producer.prepare(request))
    print(f"Producer.prepare, no-op job:  {prepare:.2f} us")
    # a batch of alike no-op requests (Producer.prepare_many): per job
    requests = [JobRequest("noop") for _ in range(BATCH)]
    per_job = per_call_us(lambda: app.producer.prepare_many(requests), 3) / BATCH
    print(f"Producer.prepare_many, {BATCH:,} no-op jobs, per job: {per_job:.2f} us")
    print(f"uuid.uuid4().hex:             {per_call_us(lambda: uuid.uuid4().hex):.2f} us")
    print(f"os.urandom(16).hex():         {per_call_us(lambda: os.urandom(16).hex()):.2f} us")
    args = ("x", "y", b"", 0, 0, 0, 0, "")
    assert len(args) == len(newjob_fields())
    frozen, plain = newjob_shaped(True), newjob_shaped(False)
    print(f"frozen slots dataclass, 8 fields: {per_call_us(lambda: frozen(*args)):.2f} us")
    print(f"plain slots dataclass, 8 fields:  {per_call_us(lambda: plain(*args)):.2f} us")
    if issubclass(NewJob, tuple):  # since 2026-12-03
        new = tuple.__new__
        print(f"NewJob by tuple.__new__:          {per_call_us(lambda: new(NewJob, args)):.2f} us")
    # a batch's ids (Producer.prepare_many): one read of os.urandom, cut up
    print(f"os.urandom(14).hex(), one id:     {per_call_us(lambda: os.urandom(14).hex()):.2f} us")
    width, batch = 28, 500

    def batch_ids() -> list[str]:
        fresh = os.urandom(14 * batch).hex()
        return [fresh[i * width:(i + 1) * width] for i in range(batch)]

    per_id = per_call_us(batch_ids, N // batch) / batch
    print(f"one read for {batch} ids, per id:  {per_id:.2f} us")


if __name__ == "__main__":
    main()

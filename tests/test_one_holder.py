"""Invariant 1, one holder: 4 OS processes x 8 async claimers race over 20,000
jobs on a real Redis; every job is leased exactly once, each with its own token."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import cast

import anyio
import pytest
from anyio.abc import Process

from leasequeue import App, JobRequest
from leasequeue.store.record import parse_record, text
from tests.harness.redis_proc import env_with_path
from tests.helpers import ready_ids

pytestmark = pytest.mark.anyio

Q = "default"
N_JOBS = 20_000
N_PROCS = 4
CLAIMERS = 8
ROOT = Path(__file__).resolve().parent.parent


def logs(paths: list[Path]) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}" for p in paths)


async def wait_ready(app: App, ready_key: str, procs: list[Process], log_paths: list[Path]) -> None:
    """Block until every process reported ready; fail fast if one died first."""
    ready = 0
    while ready < len(procs):
        if await app.redis.blpop([ready_key], timeout=1) is not None:
            ready += 1
            continue
        dead = [p.returncode for p in procs if p.returncode is not None]
        assert not dead, f"a claimer process exited before the start: {dead}\n{logs(log_paths)}"


async def test_each_job_claimed_exactly_once_across_processes(real_app: App, prefix: str,
                                                              tmp_path: Path) -> None:
    app = real_app
    job_ids = [f"j{i:05d}" for i in range(N_JOBS)]
    await app.enqueue_many([JobRequest("j", job_id=i, queue=Q) for i in job_ids])
    # test-only bookkeeping keys, outside the queue's keys
    ready_key, go_key, out_key = (f"{prefix}:test:{k}" for k in ("ready", "go", "out"))

    log_paths = [tmp_path / f"p{n}.log" for n in range(N_PROCS)]
    procs: list[Process] = []
    try:
        for n, log_path in enumerate(log_paths):
            with log_path.open("wb") as log:
                procs.append(await anyio.open_process(
                    [sys.executable, "-m", "tests.harness.claimer_proc", app.url, prefix, Q,
                     f"p{n}",
                     "--claimers", str(CLAIMERS), "--ready-key", ready_key, "--go-key", go_key,
                     "--out-key", out_key, "--timeout", "60"],
                    stdout=log, stderr=log, cwd=ROOT, env=env_with_path(),
                ))
        with anyio.fail_after(30):
            await wait_ready(app, ready_key, procs, log_paths)
        # open the barrier: one token per process, so all start together
        await app.redis.rpush(go_key, *["go"] * N_PROCS)
        with anyio.fail_after(90):
            codes = [await p.wait() for p in procs]
        assert codes == [0] * N_PROCS, logs(log_paths)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
            with anyio.CancelScope(shield=True):
                await p.aclose()

    claims = [text(entry).split() for entry in await app.redis.lrange(out_key, 0, -1)]
    seen = Counter(job_id for job_id, _token, _worker in claims)
    assert {i: n for i, n in seen.items() if n > 1} == {}, "claimed more than once"
    assert set(job_ids) - set(seen) == set(), "never claimed"
    assert set(seen) - set(job_ids) == set(), "claimed ids that were never enqueued"
    assert len(claims) == N_JOBS
    # every claim got its own fencing token from the queue's counter
    assert len({token for _id, token, _worker in claims}) == N_JOBS
    # the race was real: every process won some jobs
    assert {worker.split("-")[0] for _id, _token, worker in claims} == {
        f"p{n}" for n in range(N_PROCS)}

    qk = app.keys(Q)
    holder = {job_id: worker for job_id, _token, worker in claims}
    token_of = {job_id: int(token) for job_id, token, _worker in claims}
    raw = cast(dict[bytes, bytes], await app.redis.hgetall(qk.jobs))
    assert len(raw) == N_JOBS
    for key, value in raw.items():
        rec = parse_record(value)
        rec["id"] = key.decode()
        assert (rec["state"], rec["token"], rec["attempt"]) == (
            "leased", token_of[rec["id"]], 1), rec
        assert rec["worker"] == holder[rec["id"]]  # the record names the claimer that recorded it
    assert await app.redis.zcard(qk.leases) == N_JOBS
    assert await ready_ids(app, qk) == []

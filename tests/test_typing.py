"""The package is typed for its users (PEP 561): the wheel ships
leasequeue/py.typed, and a user's file that uses the public API passes
mypy --strict against the installed wheel — while a real type error in it
is still reported (so the check is not vacuous)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.test_packaging import build_wheel

USER_FILE = '''
from datetime import timedelta

import leasequeue as lq

app = lq.App("memory://", prefix="shop", defaults=lq.Defaults(max_attempts=5))


@app.job(queue="emails", max_attempts=3, backoff=lq.exponential(1, 60, jitter=True))
async def send_receipt(ctx: lq.Context, order_id: str) -> dict[str, bool]:
    ctx.log.info("sending", order_id=order_id)
    return {"sent": True}


@app.job
def rebuild(ctx: lq.Context) -> None:
    ctx.raise_if_stopping()


app.schedule("nightly", "rebuild", every=timedelta(hours=1))


async def produce() -> str:
    job: lq.EnqueuedJob = await app.enqueue("send_receipt", {"order_id": "o1"})
    stats: lq.QueueStats = await app.stats("emails")
    try:
        result = await app.wait(job.id, timeout=1.5)
    except (lq.JobDead, lq.Timeout) as exc:
        return str(exc)
    return f"{job.id} {stats.ready} {result}"


def produce_sync() -> int:
    with lq.SyncApp.from_app(app) as sync:
        jobs = sync.enqueue_many([lq.JobRequest("send_receipt", {"order_id": "o2"})])
        record: lq.JobRecord = sync.get_job(jobs[0].id)
        return record.attempt


worker = lq.Worker(app, queues=["emails"], concurrency=4)
'''


def mypy(site: Path, project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "user.py"],
        cwd=project, env={"PYTHONPATH": str(site), "PATH": ""}, capture_output=True,
        text=True, timeout=240)


@pytest.mark.timeout(400)
def test_a_user_file_passes_mypy_strict_against_the_wheel(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    assert "leasequeue/py.typed" in zipfile.ZipFile(wheel).namelist()
    site, project = tmp_path / "site", tmp_path / "project"
    zipfile.ZipFile(wheel).extractall(site)
    project.mkdir()
    (project / "user.py").write_text(USER_FILE)
    out = mypy(site, project)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success" in out.stdout

    # the same file with a wrong type in it is caught: the package's types are read
    (project / "user.py").write_text(USER_FILE + '\nbad: int = app.stats\n')
    out = mypy(site, project)
    assert out.returncode == 1 and "Incompatible types in assignment" in out.stdout, out.stdout

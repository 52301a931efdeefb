"""The examples run: each `python examples/X.py --smoke` (a worker process
of its own, a Redis this test starts) exits 0 and prints what it did. The
FastAPI one runs only where FastAPI is installed (it is not a dependency)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.redis_proc import RedisProcess, env_with_path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def smoke(name: str, redis_server: RedisProcess, prefix: str) -> list[str]:
    env = env_with_path()
    env.update(LEASEQUEUE_URL=redis_server.url, LEASEQUEUE_PREFIX=prefix)
    out = subprocess.run([sys.executable, str(EXAMPLES / name), "--smoke"], cwd=EXAMPLES,
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_the_wsgi_producer(redis_server: RedisProcess, prefix: str) -> None:
    signup, waited, job = smoke("wsgi_producer.py", redis_server, prefix)
    assert json.loads(signup) == {"job": "welcome:ann", "created": True}
    assert json.loads(waited) == {"result": {"sent_to": "ann"}}
    assert json.loads(job) == {"id": "welcome:ann", "state": "succeeded", "attempt": 1,
                               "result": {"sent_to": "ann"}}


def test_the_cron_example(redis_server: RedisProcess, prefix: str) -> None:
    lines = smoke("cron.py", redis_server, prefix)
    schedules = [json.loads(x) for x in lines if x.startswith("{")]
    assert [s["schedule"] for s in schedules] == ["hourly-cleanup", "nightly-cleanup"]
    assert all(s["next_fire"] for s in schedules)
    assert lines[-1].startswith("triggered schedule:hourly-cleanup:manual:")
    assert lines[-1].endswith("result 0")


@pytest.mark.skipif(importlib.util.find_spec("fastapi") is None,
                    reason="FastAPI is not installed (the example's own dependency)")
def test_the_fastapi_example(redis_server: RedisProcess, prefix: str) -> None:
    signup, waited = smoke("fastapi_app.py", redis_server, prefix)
    assert "welcome:bob" in signup and "sent_to" in waited

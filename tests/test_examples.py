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


def test_the_rate_limit_example(redis_server: RedisProcess, prefix: str) -> None:
    acme, _ = smoke("rate_limit.py", redis_server, prefix)
    spread = float(acme.split("over ")[1].split("s")[0])
    assert spread >= 1.7, acme  # 10 starts at 5 a second, no burst: 1.8 s, less timing slack
    assert acme.endswith("each on attempt 1"), acme


def test_the_saga_example(redis_server: RedisProcess, prefix: str) -> None:
    done, compensated = (json.loads(x) for x in smoke("saga.py", redis_server, prefix))
    assert done == {"order": "o-1", "state": "succeeded", "reason": None,
                    "effects": {"carrier": "booked", "charge": "charged", "stock": "reserved"}}
    assert compensated == {"order": "o-2", "state": "dead", "reason": "saga-compensated",
                           "effects": {"charge": "refunded", "stock": "released"}}


@pytest.mark.skipif(importlib.util.find_spec("starlette") is None,
                    reason="the dashboard extra is not installed")
def test_the_dashboard_example(redis_server: RedisProcess, prefix: str) -> None:
    (line,) = smoke("dashboard.py", redis_server, prefix)
    assert line.startswith("GET /queues: ") and line.endswith("emails listed: True"), line

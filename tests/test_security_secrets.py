"""No leaked secrets: the password of a Redis URL never appears in an error
message (unreachable host, wrong password, an ACL refusal), the boot log,
``repr(app)``, or the command line's output and error output."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasequeue import (
    App,
    AuthenticationFailed,
    ConfigError,
    Context,
    RedisUnavailable,
    Worker,
)
from leasequeue.redact import redact, redact_url
from tests.harness.redis_proc import RedisProcess, env_with_path, free_port
from tests.helpers import eventually, worker_running

pytestmark = pytest.mark.anyio

# distinctive, and with characters a URL must percent-encode
SECRET = "pw-7f3a9c!x"
SECRET_IN_URL = "pw-7f3a9c%21x"


@pytest.fixture(scope="module")
def secret_server() -> Iterator[RedisProcess]:
    # an evicting policy, so that the boot check names the node in its warning
    # (and, without allow_eviction, in its error)
    with RedisProcess(password=SECRET, extra=["--maxmemory-policy", "allkeys-lru"]) as server:
        yield server


def url_with_secret(port: int) -> str:
    return f"redis://:{SECRET_IN_URL}@127.0.0.1:{port}/0"


def assert_clean(text: str) -> None:
    assert SECRET not in text, text
    assert SECRET_IN_URL not in text, text
    assert "pw-7f3a9c" not in text, text


@pytest.mark.parametrize("url", [
    "redis://:s3cret@h:6379/0", "rediss://alice:s3cret@h/0", "redis://h:1/0?password=s3cret",
    "redis://u:s3c@ret@h:1/0", "cluster://u:s3cret@h:1,h:2", "unix:///r.sock?password=s3cret",
])
def test_redact_url_hides_the_password_and_keeps_the_rest(url: str) -> None:
    shown = redact_url(url)
    assert "s3c" not in shown and "***" in shown
    assert shown.split("@")[-1] == url.split("@")[-1] or "password=***" in shown


def test_redact_removes_the_password_in_any_form_from_a_text() -> None:
    url = url_with_secret(1)
    text = f"failed: {SECRET} / {SECRET_IN_URL} / {url}"
    assert_clean(redact(text, url))
    assert redact("redis://h:1/0 is fine", "redis://h:1/0") == "redis://h:1/0 is fine"


async def test_unreachable_host_error_has_no_password(prefix: str) -> None:
    app = App(url_with_secret(free_port()), prefix=prefix)
    try:
        with pytest.raises(RedisUnavailable) as exc:
            await app.enqueue("job", {}, queue="default")
        for text in (str(exc.value), repr(exc.value), exc.value.url, repr(app)):
            assert_clean(text)
        assert "redis://:***@127.0.0.1" in str(exc.value)
    finally:
        await app.close()


async def test_wrong_password_error_has_neither_password(secret_server: RedisProcess,
                                                         prefix: str) -> None:
    app = App(f"redis://:wrong-{SECRET_IN_URL}@127.0.0.1:{secret_server.port}/0", prefix=prefix)
    try:
        with pytest.raises(AuthenticationFailed) as exc:
            await app.ping()
        assert_clean(str(exc.value) + repr(exc.value))
        assert "refused the credentials" in str(exc.value)
        assert isinstance(exc.value, RedisUnavailable)  # code catching that keeps working
    finally:
        await app.close()


async def test_repr_of_app_and_its_client(secret_server: RedisProcess, prefix: str) -> None:
    app = App(secret_server.url.replace(SECRET, SECRET_IN_URL), prefix=prefix)
    try:
        await app.ping()
        assert repr(app) == (f"App('redis://:***@127.0.0.1:{secret_server.port}/0', "
                             f"prefix='{prefix}')")
        for text in (repr(app), str(app), repr(app.redis), repr(app.scripts)):
            assert_clean(text)
    finally:
        await app.close()


async def test_boot_log_and_boot_error_have_no_password(secret_server: RedisProcess,
                                                        prefix: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    app = App(secret_server.url.replace(SECRET, SECRET_IN_URL), prefix=prefix)

    @app.job()
    async def hello(ctx: Context) -> None:
        ctx.log.info("hello")

    caplog.set_level(logging.DEBUG, logger="leasequeue")
    try:
        with pytest.raises(ConfigError) as refused:  # the evicting policy, named per node
            await Worker(app, shutdown_timeout=1).run()
        assert "127.0.0.1" in str(refused.value)
        assert_clean(str(refused.value))
        await app.enqueue("hello", job_id="h1")
        async with worker_running(app, allow_eviction=True):
            await eventually(lambda: _succeeded(app, "h1"), what="the job")
    finally:
        await app.close()
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "maxmemory-policy may evict keys" in logged and "worker starting" in logged
    assert_clean(logged)


APP_MODULE = """
import os
from leasequeue import App, Context
app = App(os.environ["LQ_URL"], prefix=os.environ["LQ_PREFIX"])

@app.job()
async def hello(ctx: Context) -> None:
    pass
"""


def _cli(args: list[str], tmp_path: Path, url: str,
         prefix: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "secret_app.py").write_text(APP_MODULE)
    env = env_with_path()
    env.update(LQ_URL=url, LQ_PREFIX=prefix)
    return subprocess.run([sys.executable, "-m", "leasequeue.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_output_and_errors_have_no_password(secret_server: RedisProcess, tmp_path: Path,
                                                prefix: str) -> None:
    good = secret_server.url.replace(SECRET, SECRET_IN_URL)
    bad_host = url_with_secret(free_port())
    runs = {
        "stats": _cli(["stats", "--queue", "default", "--url", good, "--prefix", prefix],
                      tmp_path, good, prefix),
        "unreachable": _cli(["stats", "--url", bad_host, "--prefix", prefix], tmp_path,
                            bad_host, prefix),
        "worker boot": _cli(["worker", "secret_app:app", "--shutdown-timeout", "1"], tmp_path,
                            good, prefix),
        "demo": _cli(["demo", "--url", bad_host, "--jobs", "1"], tmp_path, bad_host, prefix),
    }
    assert runs["stats"].returncode == 0 and '"queue": "default"' in runs["stats"].stdout
    assert runs["unreachable"].returncode == 1
    assert runs["unreachable"].stderr.startswith("error: Redis at redis://:***@127.0.0.1")
    # the worker refuses the evicting policy at boot, after logging its start
    assert runs["worker boot"].returncode == 1
    assert "maxmemory-policy is 'allkeys-lru' on redis://:***@" in runs["worker boot"].stderr
    assert "redis://:***@" in runs["demo"].stdout + runs["demo"].stderr
    for name, run in runs.items():
        assert "Traceback" not in run.stderr, (name, run.stderr)
        assert_clean(run.stdout + run.stderr)


async def _succeeded(app: App, job_id: str) -> bool:
    return (await app.get_job(job_id)).state == "succeeded"

"""TLS (``rediss://``) with certificate verification, against a redis-server
that listens on TLS only (a loopback port; a self-signed CA made by the test
with openssl): the verified connection enqueues and a worker runs the job; a
server whose certificate the client's CA did not sign is refused with a
typed error that says so, and no job is written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from leasequeue import App, Context, RedisUnavailable, SyncApp, TlsVerificationFailed
from leasequeue.store import direct, sync_lane
from tests.harness.redis_proc import RedisProcess
from tests.harness.tls import make_ca, make_server_tls
from tests.helpers import eventually, used_on_two_loops, worker_running

pytestmark = pytest.mark.anyio

PASSWORD = "tls-s3cret"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    folder = tmp_path_factory.mktemp("tls")
    with RedisProcess(tls=make_server_tls(folder), password=PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ca(tmp_path_factory.mktemp("other-ca"), "untrusted")[0]


async def test_verified_tls_connection_enqueues_and_runs(tls_server: RedisProcess,
                                                         prefix: str) -> None:
    assert tls_server.url.startswith("rediss://")
    app = App(tls_server.url, prefix=prefix)
    ran: list[int] = []

    @app.job()
    async def hello(ctx: Context, i: int) -> int:
        ran.append(i)
        return i + 1

    try:
        await app.enqueue("hello", {"i": 41}, job_id="tls-1")
        # the one-job enqueue never reads a TLS socket itself (store/spin.py)
        lane = app.scripts._lane
        assert lane is not None and lane._idle
        proto = lane._idle[0]._writer.transport.get_protocol()
        assert isinstance(proto, direct._LaneProtocol) and proto.read_now is None
        async with worker_running(app):
            await eventually(lambda: _succeeded(app, "tls-1"), what="the job over TLS")
        assert ran == [41]
        assert (await app.get_job("tls-1")).result == 42
    finally:
        await app.close()


def test_the_sync_producer_writes_and_reads_on_the_tls_socket(tls_server: RedisProcess,
                                                              prefix: str) -> None:
    """SyncApp drives its connection's socket itself (store/sync_lane.py):
    over TLS that socket is an SSLSocket, and the replies stay in step."""
    with SyncApp(tls_server.url, prefix=prefix) as sync:
        assert sync.enqueue("hello", {"i": 1}, job_id="sync-tls-1").created
        assert not sync.enqueue("hello", {"i": 1}, job_id="sync-tls-1").created
        lane = sync.scripts._lane
        assert lane is not None and lane._idle
        assert all(sync_lane.direct_io(conn) for conn in lane._idle)
        assert all(sync_lane.read_now(conn) is None for conn in lane._idle)  # no spin on TLS
        assert sync.get_job("sync-tls-1").payload == {"i": 1}
        assert sync.stats().ready == 1


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the old loop's transport, collected
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_app_on_tls_used_again_on_a_new_loop_takes_no_connection_of_the_old_one(
        tls_server: RedisProcess, prefix: str) -> None:
    """rediss:// connections are loop-aware (connection.LoopAwareSSLConnection)."""
    assert used_on_two_loops(tls_server.url, prefix) == (["default"], "queued", False, True)


def test_the_server_speaks_tls_only(tls_server: RedisProcess) -> None:
    plain = redis_sync.Redis(port=tls_server.port, password=PASSWORD, socket_timeout=2,
                             socket_connect_timeout=2)
    try:
        with pytest.raises(redis_sync.exceptions.ConnectionError):
            plain.ping()
    finally:
        plain.close()


@pytest.mark.parametrize("trust", ["untrusted-ca", "system-store"])
async def test_an_unverified_server_is_refused(tls_server: RedisProcess, other_ca: Path,
                                               prefix: str, trust: str) -> None:
    base = f"rediss://:{PASSWORD}@127.0.0.1:{tls_server.port}/0"
    url = f"{base}?ssl_ca_certs={other_ca}" if trust == "untrusted-ca" else base
    app = App(url, prefix=prefix)
    try:
        with pytest.raises(TlsVerificationFailed) as exc:
            await app.enqueue("hello", {"i": 1}, queue="default", job_id="never")
        text = str(exc.value)
        assert "certificate verify failed" in text.lower(), text
        assert "TLS certificate could not be verified" in text, text  # not only OpenSSL's words
        assert isinstance(exc.value, RedisUnavailable)  # code catching that keeps working
        assert PASSWORD not in text and PASSWORD not in repr(exc.value)
    finally:
        await app.close()
    admin = tls_server.client()
    try:
        assert admin.hget(f"{{{prefix}:default}}:jobs", "never") is None
    finally:
        admin.close()


async def _succeeded(app: App, job_id: str) -> bool:
    return (await app.get_job(job_id)).state == "succeeded"

"""One worker loses its network to Redis in the middle of a long job (a TCP
proxy between it and Redis resets every connection and refuses new ones).
Its lease runs out on the server clock, a second worker (connected directly)
reaps the job, runs it again and succeeds. When the network comes back, the
first worker's result is discarded: its ack carries a stale token and is
refused. The job is accepted as succeeded exactly once.

Then the silent kind of failure: connections that stop delivering without a
reset must not hang a worker forever."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from leasequeue import App, JobRequest
from leasequeue.runtime.claimer import IDLE_POLL
from leasequeue.store.connection import SOCKET_TIMEOUT
from tests.conftest import wait_for
from tests.harness.procs import WorkerProcs
from tests.harness.redis_proc import RedisProcess
from tests.harness.reliability import (
    RELIABILITY_APP,
    Execution,
    counters,
    enqueue,
    executions,
    log_lines,
    records,
    succeeded_events,
)
from tests.harness.tcp_proxy import TcpProxy

JOB_S = 3.0
LEASE = "1.5"


@pytest.fixture
def workers(server: RedisProcess, tmp_path: Path) -> Iterator[WorkerProcs]:
    with WorkerProcs(server.url, "cut", tmp_path) as procs:
        yield procs


def test_cut_worker_loses_its_lease_and_its_result(
        server: RedisProcess, proxy: TcpProxy, workers: WorkerProcs, tmp_path: Path) -> None:
    r = redis_sync.Redis(port=server.port)
    enqueue(server.url, "cut", [JobRequest("work", {"seconds": JOB_S}, job_id="long",
                                           queue="default", max_attempts=5)])
    # the isolated worker talks to Redis through the proxy, but records its
    # executions directly, so the test sees what it ran during the cut
    env = {"LQ_URL": proxy.url, "LQ_RECORD_URL": server.url, "LQ_AUDIT": "1"}
    workers.start("isolated", "--concurrency", "1", "--lease", LEASE, "--shutdown-timeout", "2",
                  app=RELIABILITY_APP, env=env)
    first = Execution("start", "long", 1, "isolated", 0)

    def ran(kind: str, token: int, worker: str) -> bool:
        return any((e.kind, e.job, e.token, e.worker) == (kind, "long", token, worker)
                   for e in executions(r, "cut"))

    wait_for(lambda: ran("start", 1, "isolated"), timeout=20, what=f"{first} to start")

    proxy.cut()
    workers.start("direct", "--concurrency", "1", "--lease", LEASE, "--shutdown-timeout", "2",
                  app=RELIABILITY_APP, env={"LQ_AUDIT": "1"})
    # keep the cut until the direct worker has taken the job over under a new
    # token; the isolated worker stops its run once renewals have failed for
    # longer than the lease (or, if it finishes first, its ack is refused)
    wait_for(lambda: ran("start", 2, "direct"), timeout=30,
             what="the direct worker to take the job over")
    isolated_log = tmp_path / "isolated.log"
    wait_for(lambda: log_lines(isolated_log, "lease lapsed") or ran("end", 1, "isolated"),
             timeout=30, what="the isolated run to be stopped or to end")
    proxy.heal()
    if ran("end", 1, "isolated"):
        wait_for(lambda: log_lines(isolated_log, "ack refused"), timeout=20,
                 what="the isolated worker's ack to be refused after the network heals")
    wait_for(lambda: records(r, "cut")["long"]["state"] == "succeeded", timeout=20,
             what="the direct worker's run to succeed")
    workers.terminate_all()

    rec = records(r, "cut")["long"]
    assert (rec["state"], rec["token"], rec["worker"]) == ("succeeded", 2, "direct"), rec
    assert counters(r, "cut")["succeeded"] == 1
    assert succeeded_events(r, "cut") == {"long": 1}
    # the isolated run started once and never finished the job; the direct run did
    runs = sorted((e.token, e.kind, e.worker) for e in executions(r, "cut"))
    assert runs in ([(1, "start", "isolated"), (2, "end", "direct"), (2, "start", "direct")],
                    [(1, "end", "isolated"), (1, "start", "isolated"),
                     (2, "end", "direct"), (2, "start", "direct")]), runs
    # the isolated worker noticed the outage, then the refusal
    assert log_lines(isolated_log, "lease renewal failed")
    print(f"\nnetwork cut: proxy connections {proxy.accepted}; isolated worker warnings: "
          f"{len(log_lines(isolated_log, 'ack failed'))} ack retries, "
          f"{len(log_lines(isolated_log, 'claim failed'))} claim failures")


BLACKHOLE_RECOVERY_S = 20.0


def test_silently_dead_connection_is_replaced(
        server: RedisProcess, proxy: TcpProxy, workers: WorkerProcs, tmp_path: Path) -> None:
    """A connection that goes silent (no RST: the host vanished, a failover moved the
    address) must not hang a worker forever: every command needs a bound, after
    which the connection is dropped and a new one made (which works here).
    leasequeue sets its own socket_timeout (connection.SOCKET_TIMEOUT): redis-py
    before 8 would wait on a silent connection forever."""
    r = redis_sync.Redis(port=server.port)
    workers.start("isolated", "--concurrency", "2", "--lease", LEASE, "--shutdown-timeout", "2",
                  app=RELIABILITY_APP, env={"LQ_URL": proxy.url, "LQ_RECORD_URL": server.url})
    enqueue(server.url, "cut", [JobRequest("work", job_id="before", queue="default")])
    wait_for(lambda: records(r, "cut")["before"]["state"] == "succeeded", timeout=20,
             what="the worker to run a job before the blackhole")
    assert proxy.blackhole() >= 1  # its pooled and blocked connections go silent
    enqueue(server.url, "cut", [JobRequest("work", job_id="after", queue="default")])
    wait_for(lambda: records(r, "cut")["after"]["state"] == "succeeded",
             timeout=BLACKHOLE_RECOVERY_S,
             what="the worker to give up its silent connections and run the next job")


def test_the_client_bounds_every_command_itself() -> None:
    """The bound the test above relies on must be leasequeue's own choice, not an
    accident of the installed redis-py version (it never connects here), and
    the 5 s the README states."""
    app = App("redis://127.0.0.1:9/0")
    timeout = app.redis.connection_pool.connection_kwargs.get("socket_timeout")
    assert timeout == SOCKET_TIMEOUT == 5.0 and IDLE_POLL < timeout, timeout

"""Session fixtures for a Redis Cluster (3 masters, 3 replicas) and a Sentinel
setup (master, replica, sentinel), and the ``cluster`` marker.

Loaded as a plugin by tests/conftest.py. A fixture that cannot create its
servers skips the tests that need it, with the reason, on a developer's
machine; in CI (``CI=true``, which .ci/run gets) it fails them instead, so a
broken cluster setup cannot turn 80-odd tests into a green run of skips."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.harness.cluster_proc import ClusterError, RedisCluster
from tests.harness.sentinel_proc import SentinelError, SentinelSetup


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def cannot_create(what: str, exc: BaseException) -> None:
    """Skip locally (the tools may be missing); fail in CI."""
    reason = f"cannot create {what}: {exc}"
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing cluster fails the run)", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "cluster: needs a Redis Cluster or Sentinel started by the test session "
        "(select with -m cluster, leave out with -m 'not cluster')",
    )


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """3 masters + 3 replicas on free loopback ports. A test that kills a
    master restarts it afterwards (it rejoins as a replica), so the session
    keeps 3 masters with one replica each."""
    cluster = RedisCluster()
    try:
        cluster.start()
    except (ClusterError, RuntimeError, OSError) as exc:
        cluster.cleanup()
        cannot_create("a Redis Cluster", exc)
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelSetup]:
    """A master, its replica and one sentinel (quorum 1, down after 1 s).
    A failover leaves it with one master and no replica."""
    setup = SentinelSetup()
    try:
        setup.start()
    except (SentinelError, RuntimeError, OSError) as exc:
        setup.cleanup()
        cannot_create("a Redis Sentinel setup", exc)
    yield setup
    setup.cleanup()

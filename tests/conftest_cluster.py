"""Session fixtures for a Redis Cluster (3 masters, 3 replicas) and a Sentinel
setup (master, replica, sentinel), and the ``cluster`` marker.

Loaded as a plugin by tests/conftest.py. A fixture that cannot create its
servers skips the tests that need it, with the reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.cluster_proc import ClusterError, RedisCluster
from tests.harness.sentinel_proc import SentinelError, SentinelSetup


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
        pytest.skip(f"cannot create a Redis Cluster: {exc}")
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
        pytest.skip(f"cannot create a Redis Sentinel setup: {exc}")
    yield setup
    setup.cleanup()

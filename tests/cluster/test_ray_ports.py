"""A node whose ports clash starts again on fresh ones, instead of failing the run.

CI once lost the node-death test to ``ray start`` exiting with "Ray component
metrics_export is trying to use a port number ... that is used by other components": two
ports probed one after the other had come back equal.
"""

from __future__ import annotations

import logging

import pytest
from rollhub.testing import ray_cluster
from rollhub.testing.ray_cluster import HEAD, LocalRayCluster

from tests.cluster.cluster_config import ray  # noqa: F401  (skips these tests without Ray)


def test_free_ports_are_distinct():
    ports = ray_cluster.free_ports(64)
    assert len(set(ports)) == 64


def test_a_node_that_exits_over_a_port_clash_starts_on_fresh_ports(tmp_path, monkeypatch, caplog):
    real = ray_cluster.free_ports
    calls: list[list[int]] = []

    def clash_once(count: int) -> list[int]:
        ports = real(count)
        if not calls:
            ports[4] = ports[0]  # metrics export on the node manager's port, as in CI
        calls.append(ports)
        return ports

    monkeypatch.setattr(ray_cluster, "free_ports", clash_once)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    caplog.set_level(logging.WARNING, logger=ray_cluster.__name__)
    with LocalRayCluster(tmp_path, workers=0, health_check_s=2.0) as cluster:
        assert cluster.nodes[HEAD].alive
        assert cluster.port == calls[-1][-1]
    assert len(calls) == 2
    log_text = (tmp_path / f"{HEAD}.log").read_text()
    assert "is trying to use a port number" in log_text
    assert any("starting it on fresh ones" in r.getMessage() for r in caplog.records)


def test_a_node_that_fails_for_another_reason_is_not_retried(tmp_path, monkeypatch):
    calls: list[int] = []
    real = ray_cluster.free_ports

    def count(n: int) -> list[int]:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(ray_cluster, "free_ports", count)
    # a negative CPU count: `ray start` exits at once, and no port is to blame
    cluster = LocalRayCluster(tmp_path, workers=0, head_cpus=-1)
    with pytest.raises(ray_cluster.RayClusterError, match=r"did not start"):
        cluster.start()
    assert len(calls) == 1

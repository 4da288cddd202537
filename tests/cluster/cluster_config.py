"""The rollhub config the cluster tests run on the three-node Ray cluster, and what it
names: the chat agent, the pool's engine factory and the resource only worker nodes offer;
and the guard of a test that kills a worker node.

Importing this skips the importing test module when Ray is not installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rollhub.testing.ray_cluster import LocalRayCluster

ray = pytest.importorskip("ray", reason="Ray is an optional dependency (rollhub[ray])")

#: every worker node offers it; the head does not
WORKER = {"rollhub_worker": 0.001}
CHAT_AGENT = Path(__file__).parents[1] / "gateway" / "pool" / "chat_agent.py"
ENGINE_FACTORY = f"{Path(__file__).parents[1] / 'gateway' / 'pool' / 'engines.py'}:turn_echo"


def cluster_config(
    tmp_path: Path, cluster: LocalRayCluster, model_dir: str, **sections: Any
) -> dict[str, Any]:
    """A rollhub config: the chat agent as Ray actors on the worker nodes, a pool of two
    gateway replicas as Ray actors there too (a scripted engine, 0.2 s a turn), the
    recording trainer; ``sections`` are merged over it."""
    cfg: dict[str, Any] = {
        "experiment": {"name": "cluster", "n_samples": 2, "timeout_s": 60, "progress": False,
                       "session_attempts": 3, "concurrency": 8},
        "runtime": {"name": "ray", "app": f"{CHAT_AGENT}:app", "address": cluster.address,
                    "actors": 2, "resources": WORKER, "start_timeout_s": 30,
                    "head_timeout_s": 5},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {
            "name": "gateway", "model": model_dir, "admin_token": "pool-admin",
            "log_turns": False, "engine": {"name": "scripted", "options": {"latency_s": 0.2}},
            "pool": {"replicas": 2, "placement": "ray", "ray_address": cluster.address,
                     "ray_resources": WORKER, "engine_factory": ENGINE_FACTORY,
                     "start_timeout_s": 60, "restarts": 2},
        },
        "trainer": {"name": "recording"},
        "training": {"batch_groups": 2, "steps": 3, "shuffle": False, "checkpoint_every": 1},
    }  # fmt: skip
    for name, values in sections.items():
        cfg[name] = {**cfg.get(name, {}), **values}
    return cfg


@contextlib.contextmanager
def back_up_if_failed(cluster: LocalRayCluster, name: str) -> Iterator[None]:
    """Around a test that kills node ``name`` and starts it again: should the test fail
    before that, the node is started here, so the tests after it get the whole cluster."""
    try:
        yield
    except BaseException:
        if not cluster.nodes[name].alive:
            cluster.wait_node_gone(name)
            cluster.start_node(name)
        raise

"""Fixtures of the cluster tests: a real three-node Ray cluster on this machine (a head
and two worker nodes, each its own ``ray start`` process), and what runs on it.

The cluster is shared by every test here (starting one takes 10-20 s on two cores); a
test that kills a node or the head leaves a working cluster behind. Only the processes
the fixture started are ever signalled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional dependency (rollhub[ray])")

from rollhub.testing.ray_cluster import LocalRayCluster  # noqa: E402

#: every worker node offers it; the head does not
WORKER = {"rollhub_worker": 0.001}
CHAT_AGENT = Path(__file__).parents[1] / "gateway" / "pool" / "chat_agent.py"
ENGINE_FACTORY = f"{Path(__file__).parents[1] / 'gateway' / 'pool' / 'engines.py'}:turn_echo"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    """A head (1 CPU) and two worker nodes (1 CPU each), 75 MiB object stores, node death
    seen by the head within about 2 s."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")  # the driver side of a throwaway cluster
        mp.delenv("RAY_ADDRESS", raising=False)
        root = tmp_path_factory.mktemp("ray-cluster")
        with LocalRayCluster(root, workers=2, cpus=1, health_check_s=2.0) as c:
            yield c
        if ray.is_initialized():
            ray.shutdown()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """SmolLM2's tokenizer and chat template as a plain directory (quick for replicas)."""
    import json

    from rollhub_gateway.models import load_tokenizer

    path = tmp_path_factory.mktemp("smollm2-tokenizer")
    load_tokenizer("smollm2-135m-instruct").save_pretrained(path)
    (path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192}))
    return str(path)


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

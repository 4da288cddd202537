"""Fixtures of the cluster tests: a real three-node Ray cluster on this machine (a head
and two worker nodes, each its own ``ray start`` process), and what runs on it.

The cluster is shared by every test here (starting one takes 10-20 s on two cores); a
test that kills a node or the head leaves a working cluster behind. Only the processes
the fixture started are ever signalled. The config the tests run on the cluster is
:mod:`tests.cluster.cluster_config`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rollhub.testing.ray_cluster import LocalRayCluster

from tests.cluster.cluster_config import ray  # skips the cluster tests without Ray


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

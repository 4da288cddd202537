"""The walk-through of docs/ray.md on the cluster fixture: ``rollhub run`` with
``examples/ray/rollouts.toml`` (the arithmetic agent as Ray actors, a pool of two gateway
replicas with SmolLM2 on the worker nodes), exactly as the page runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each replica loads SmolLM2

CONFIG = Path(__file__).parents[2] / "examples" / "ray" / "rollouts.toml"


def test_the_walkthrough_runs_on_the_worker_nodes(cluster, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "RAY_ADDRESS": cluster.address, "RAY_AUTH_MODE": "disabled",
           "ROLLHUB_STORE__URL": f"file://{tmp_path / 'store'}"}  # fmt: skip
    exe = Path(sys.executable).with_name("rollhub")
    proc = subprocess.run(
        [str(exe), "run", str(CONFIG), "--max-prompts", "2", "--n-samples", "2",
         "--run-dir", str(run), "--no-progress"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == 4 and summary["ok"] == 4, summary["failure_causes"]
    # the agents ran on the worker nodes only (the runtime's resources), spread over both
    assert set(summary["episodes_by_node"]) == {"worker-1", "worker-2"}
    assert summary["infra_failed"] == 0 and summary["sampled_tokens"] > 0

"""The head of the cluster SIGKILLed during ``rollhub run``: the run stops with one clear
line (no episode ends failed for it), and ``rollhub run --resume`` on a new head goes on
from the last checkpoint to the last step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.cluster.cluster_config import CHAT_AGENT, ENGINE_FACTORY, WORKER

ROOT = Path(__file__).parents[2]
#: one group a step, about 1.3 s each: the run is still going when the head's loss is seen
STEPS = 8


def _write_run(tmp_path: Path, model_dir: str) -> Path:
    with (tmp_path / "data.jsonl").open("w") as f:
        for i in range(STEPS):
            f.write(json.dumps({"id": f"q{i}", "turns": 3, "retries": 0}) + "\n")
    cfg = tmp_path / "rollhub.toml"
    # no cluster address in the file: RAY_ADDRESS names the head, old or new
    cfg.write_text(f"""
[experiment]
name = "head-death"
dataset = "data.jsonl"
n_samples = 2
timeout_s = 60
progress = false

[runtime]
name = "ray"
app = "{CHAT_AGENT}:app"
actors = 2
resources = {json.dumps(WORKER).replace(":", " =")}
head_timeout_s = 2

[store]
url = "file://store"

[token_source]
name = "gateway"
model = "{model_dir}"
log_turns = false
engine = {{ name = "scripted", options = {{ latency_s = 0.3 }} }}
pool = {{ replicas = 2, placement = "ray", engine_factory = "{ENGINE_FACTORY}", ray_resources = {json.dumps(WORKER).replace(":", " =")} }}

[trainer]
name = "recording"

[training]
batch_groups = 1
checkpoint_every = 1
shuffle = false

[plugins]
modules = ["tests.cluster.recording_trainer"]
""")
    return cfg


def _rollhub(args: list[str], cwd: Path, address: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    exe = Path(sys.executable).with_name("rollhub")
    return subprocess.Popen([str(exe), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip


def test_the_head_dies_the_run_stops_clearly_and_resumes_on_a_new_head(
    cluster, model_dir, tmp_path
):
    cfg = _write_run(tmp_path, model_dir)
    run = tmp_path / "run"
    proc = _rollhub(["run", str(cfg), "--run-dir", str(run)], tmp_path, cluster.address)
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "latest").exists():  # a step done and kept
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        cluster.kill_node("head")
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    error = [line for line in out.splitlines() if line.startswith("rollhub: error:")]
    assert len(error) == 1, out
    assert "has not answered for" in error[0] and "runtime.head_timeout_s = 2" in error[0]
    assert f"rollhub run --resume {run}" in error[0]
    rows = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert {r["status"] for r in rows} == {"ok"}  # the episodes it kept: none failed for it
    done = len((run / "metrics.jsonl").read_text().splitlines())
    assert 1 <= done < STEPS

    # a new cluster (head and workers) under a new address; the run goes on from there
    cluster.stop()
    cluster.start()
    proc = _rollhub(["run", "--resume", str(run)], tmp_path, cluster.address)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    assert f"trained {STEPS}/{STEPS} steps" in out
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(STEPS))
    rows = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert sorted((r["step"], r["group_id"], r["sample_index"]) for r in rows) == [
        (s, f"q{s}", i) for s in range(STEPS) for i in range(2)
    ]
    assert {r["status"] for r in rows} == {"ok"}
    assert all(set(m["episodes_by_node"]) <= {"worker-1", "worker-2"} for m in metrics)

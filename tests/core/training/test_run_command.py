"""``rollhub run`` with a trainer that trains: outputs, metric sinks, kill and ``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

AGENT = Path(__file__).parent / "agents" / "policy_agent.py"

TRAINER_PLUGIN = '''
import asyncio, json
from pathlib import Path
from rollhub import hookimpl
from rollhub.training import PolicyTrainer, StepResult


class SlowTrainer(PolicyTrainer):
    name = "slow"

    def __init__(self, options=None, *, run_dir=None, **kw):
        super().__init__(options, run_dir=run_dir, **kw)
        self.done = 0

    async def step(self, batch):
        await asyncio.sleep(0.4)
        self.done += 1
        with open(self.run_dir / "trained.jsonl", "a") as f:
            f.write(json.dumps({"step": batch.step, "version": batch.weight_version,
                                "groups": [g.group_id for g in batch.groups]}) + "\\n")
        return StepResult(batch.weight_version + 1, {"loss": 1.0 / (1 + batch.step)})

    async def save_state(self, directory):
        (directory / "done").write_text(str(self.done))
        return {"done": self.done}

    async def load_state(self, directory, state):
        self.done = int((directory / "done").read_text())


@hookimpl
def rollhub_register_components(registry):
    registry.add_trainer(SlowTrainer)
'''


def _setup(tmp_path: Path, n_prompts: int, extra: str = "") -> Path:
    (tmp_path / "slow_trainer.py").write_text(TRAINER_PLUGIN)
    # the test's own copy of the agent: its workers' command lines name this copy, which
    # no other test's workers do (tests/plugins/tinker runs the same agent meanwhile)
    (tmp_path / AGENT.name).write_text(AGENT.read_text())
    with (tmp_path / "data.jsonl").open("w") as f:
        for i in range(n_prompts):
            f.write(json.dumps({"id": f"q{i}", "log": str(tmp_path / "served.jsonl")}) + "\n")
    cfg = tmp_path / "rollhub.toml"
    cfg.write_text(f"""
[experiment]
name = "train-cli"
dataset = "data.jsonl"
n_samples = 2
timeout_s = 30
progress = false

[runtime]
name = "local"
app = "{tmp_path / AGENT.name}:app"
workers = 1

[store]
url = "file://store"

[trainer]
name = "slow"

[training]
batch_groups = 2
checkpoint_every = 1
shuffle = false
{extra}

[plugins]
modules = ["slow_trainer"]
""")
    return cfg


def _rollhub(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("rollhub")
    return subprocess.Popen([str(exe), *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


def test_training_run_with_sinks(tmp_path):
    cfg = _setup(tmp_path, 4, extra='metric_sinks = ["wandb", "tensorboard", "mlflow"]\n'
                                   '[training.sinks.wandb]\nproject = "rollhub-test"\n')
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline"}
    proc = _rollhub("run", str(cfg), "--run-dir", str(tmp_path / "run"), cwd=tmp_path, env=env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    run = tmp_path / "run"
    assert "step 2/2" in out and "trained 2/2 steps" in out
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert (run / "training.png").stat().st_size > 10_000
    assert (run / "checkpoints" / "latest").read_text() == "step-000002"
    _check_manifest(run, cfg)

    # the same keys reached every sink
    # W&B offline: the run's record log holds each history item as key + JSON value
    (record_log,) = run.glob("wandb/offline-run-*/run-*.wandb")
    data = record_log.read_bytes()
    for key in ("reward_mean", "loss", "sampled_tokens", "staleness_max", "weight_version"):
        assert key.encode() in data, key
    assert json.dumps(rows[1]["loss"]).encode() in data  # 0.5, the second step's loss

    scalars = _tensorboard_scalars(next((run / "tensorboard").glob("events.out.tfevents.*")))
    for key in ("loss", "reward_mean"):
        assert [s for s, _ in scalars[key]] == [r["step"] for r in rows]
        assert [v for _, v in scalars[key]] == pytest.approx([r[key] for r in rows], rel=1e-6)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(run / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("rollhub")
    (mrun,) = client.search_runs([exp.experiment_id])
    hist = client.get_metric_history(mrun.info.run_id, "reward_mean")
    assert [m.value for m in hist] == pytest.approx([r["reward_mean"] for r in rows])


ROOT = Path(__file__).resolve().parents[3]


def _check_manifest(run: Path, cfg: Path) -> dict:
    """What produced the run: this checkout's commit, versions, the config, the machine."""
    manifest = json.loads((run / "manifest.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert manifest["git"]["commit"] == head and isinstance(manifest["git"]["dirty"], bool)
    assert manifest["project_git"] is None  # the config lies outside any checkout
    for name in ("rollhub", "rollhub-gateway", "torch", "transformers", "trl", "python"):
        assert manifest["versions"][name], name
    assert manifest["config"] == json.loads((run / "config.json").read_text())
    assert manifest["config_file"] == str(cfg.resolve()) and "run" in manifest["command"]
    assert manifest["seed"] == manifest["config"]["experiment"]["seed"]
    machine = manifest["machine"]
    assert machine["cpus"] >= 1 and machine["memory_bytes"] > 2**30
    return manifest


def _tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Scalars of an event file, read with its TFRecord framing (length, crc, data, crc)."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[tuple[int, float]]] = {}
    data, pos = path.read_bytes(), 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
        for v in event.summary.value:
            out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def test_kill_mid_run_then_resume(tmp_path):
    cfg = _setup(tmp_path, 10)  # 5 steps of 2 groups
    run = tmp_path / "run"
    proc = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path)
    latest = run / "checkpoints" / "latest"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if latest.exists() and latest.read_text() == "step-000002":
            break
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    trained_before = [json.loads(x) for x in (run / "trained.jsonl").read_text().splitlines()]
    served_before = [json.loads(x)["id"] for x in (tmp_path / "served.jsonl").read_text().splitlines()]
    (tmp_path / "served.jsonl").unlink()

    proc = _rollhub("run", "--resume", str(run), cwd=tmp_path)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    trained = [json.loads(x) for x in (run / "trained.jsonl").read_text().splitlines()]
    after = trained[len(trained_before):]
    # the resumed run starts at the checkpoint: step 2, version 2, and trains to the end
    assert [t["step"] for t in after] == [2, 3, 4]
    assert [t["version"] for t in after] == [2, 3, 4]
    served_after = [json.loads(x)["id"] for x in (tmp_path / "served.jsonl").read_text().splitlines()]
    done_before = {g for t in trained_before if t["step"] < 2 for g in t["groups"]}
    assert done_before == {"q0", "q1", "q2", "q3"}
    assert not done_before & set(served_after)  # nothing of a checkpointed step sampled again
    assert set(served_after) == {f"q{i}" for i in range(4, 10)}
    assert len(served_before) >= 8
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert (run / "checkpoints" / "latest").read_text() == "step-000005"
    # the manifest says the run was resumed, and by what
    (resumed,) = _check_manifest(run, cfg)["resumed"]
    assert "--resume" in resumed["command"] and resumed["versions"]["rollhub"]
    # the trainer's state came back: 2 steps before the kill + 3 after
    assert (run / "checkpoints" / "step-000005" / "trainer" / "done").read_text() == "5"
    # no worker outlived either run
    ps = subprocess.run(["pgrep", "-f", str(tmp_path / AGENT.name)], capture_output=True,
                        text=True)
    assert ps.stdout.strip() == ""


def test_resume_keeps_the_settings_the_run_started_with(tmp_path):
    # a learning-rate-0 control or a short run is made with environment overrides; resumed
    # without them, it must go on with the same settings, not the file's
    cfg = _setup(tmp_path, 6)  # 3 steps of 2 groups in the file
    run = tmp_path / "run"
    env = {**os.environ, "ROLLHUB_TRAINING__STEPS": "1"}
    out, _ = _rollhub("run", str(cfg), "--run-dir", str(run), cwd=tmp_path, env=env).communicate(
        timeout=240)  # fmt: skip
    assert "trained 1/1 steps" in out, out
    plain = {k: v for k, v in os.environ.items() if not k.startswith("ROLLHUB_")}
    proc = _rollhub("run", "--resume", str(run), cwd=tmp_path, env=plain)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "step 2/" not in out and "trained 1/1 steps" in out, out
    assert len((run / "trained.jsonl").read_text().splitlines()) == 1
    # a setting changed on purpose when resuming is taken, and said
    env = {**plain, "ROLLHUB_TRAINING__STEPS": "2"}
    proc = _rollhub("run", "--resume", str(run), cwd=tmp_path, env=env)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out
    assert "training.steps: 1 when the run started, 2 now" in out, out
    assert "trained 2/2 steps" in out, out
    assert [json.loads(x)["step"] for x in (run / "trained.jsonl").read_text().splitlines()] == [0, 1]

"""The Strands repair agent trains, short: ``rollhub run examples/repair/train.toml`` for 2
steps of 2 tasks × 4 samples of at most 3 model turns, every episode in its own sandbox of the real local provider,
SmolLM2 on the CPU, the held-out smoke tasks scored before and after; then the same agent's
episodes in containers of the example's image under podman.

Asserted: a sandbox command's output sits in the record as environment tokens (mask 0),
every reward is the exit code of the task's check (never the reply), per-split figures with
95% intervals are printed and kept, and the podman variant's sandboxes were containers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rollhub.export import read_rows
from rollhub_gateway.models import SMOLLM2, load_tokenizer

from tests.deploy_image.engine import EngineMissing, base_image, find_podman, host_arch

pytestmark = pytest.mark.slow

REPAIR = Path(__file__).resolve().parents[2] / "examples" / "repair"
ROLLHUB = Path(sys.executable).parent / "rollhub"

SHORT = {
    "ROLLHUB_TRAINING__STEPS": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "2",
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "2",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "4",
    "ROLLHUB_EXPERIMENT__DATASET": '"data/smoke.jsonl"',
    "ROLLHUB_EVAL__DATASET": '"data/smoke.jsonl"',
    "ROLLHUB_EVAL__MAX_PROMPTS": "4",
    "ROLLHUB_EVAL__N_SAMPLES": "2",
    # an episode of 3 model turns still acts, sees the output and acts again: what the tests
    # read; the example's 5 took half as long again (150 s against 99 s here)
    "ROLLHUB_TOKEN_SOURCE__POLICY__MAX_TURNS": "3",
}


def _result(row: dict[str, Any]) -> dict[str, Any]:
    value = row["result"]
    return json.loads(value) if isinstance(value, str) else value


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("repair")
    env = {**os.environ, **SHORT, "ROLLHUB_STORE__URL": f'"file://{tmp / "store"}"',
           "ROLLHUB_SANDBOX_ROOT": str(tmp / "sandboxes")}
    out = subprocess.run(
        [str(ROLLHUB), "run", str(REPAIR / "train.toml"), "--run-dir", str(tmp / "run"),
         "--no-progress"],
        env=env, capture_output=True, text=True, timeout=1200,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return tmp / "run", out.stdout


def test_two_steps_trained_and_the_held_out_splits_have_intervals(
    trained: tuple[Path, str],
) -> None:
    run, stdout = trained
    assert "step 2/2" in stdout
    assert "held-out depth-1" in stdout and "held-out depth-2" in stdout
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    report = json.loads((run / "eval.json").read_text())
    for side in ("before", "after"):
        splits = report[side]["splits"]
        assert set(splits) == {"depth-1", "depth-2"}
        for figures in splits.values():
            lo, hi = figures["pass_at_1_ci"]
            assert 0.0 <= lo <= figures["pass_at_1"] <= hi <= 1.0
    assert json.loads((run / "manifest.json").read_text())["seed"] == 1


def test_every_reward_is_the_checks_exit_code(trained: tuple[Path, str]) -> None:
    run, _ = trained
    rows = [r for r in read_rows(run / "episodes.jsonl") if r["status"] == "ok"]
    assert len(rows) >= 12
    for row in rows:
        result = _result(row)
        check = result["check"]
        assert row["reward"] == (1.0 if check["exit_code"] == 0 else 0.0), row["episode_id"]
        assert check["output"].startswith("PASS" if check["exit_code"] == 0 else "FAIL")
        assert result["metrics"]["sandbox"] == "local"


def test_a_sandbox_commands_output_is_in_the_record_with_mask_zero(
    trained: tuple[Path, str],
) -> None:
    run, _ = trained
    tok = load_tokenizer(SMOLLM2)
    seen = 0
    for row in read_rows(run / "episodes.jsonl"):
        if row["status"] != "ok":
            continue
        commands = _result(row)["metrics"]["commands"]
        for rec in row["traces"]:
            masked = tok.decode([t for t, m in zip(rec["response_ids"], rec["response_mask"],
                                                   strict=True) if not m])
            sampled = tok.decode([t for t, m in zip(rec["response_ids"], rec["response_mask"],
                                                    strict=True) if m])
            for command in commands:
                if f"exit code {command['exit_code']}" in masked:
                    assert "<|im_start|>tool\n" in masked  # the tool turn, not trained
                    assert "exit code" not in sampled  # the model never wrote it
                    seen += 1
                    break
    assert seen, "no episode ran a command whose output reached the model"


@pytest.fixture(scope="module")
def repair_image(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """``(docker provider options, image)``: the example's Dockerfile built under podman on
    a Debian base made locally (no registry is reachable)."""
    try:
        podman = find_podman(tmp_path_factory.mktemp("podman"))
        base = base_image(podman, host_arch(), tmp_path_factory.mktemp("rootfs"))
    except EngineMissing as exc:
        pytest.skip(f"needs podman (.ci/run installs it): {exc}")
    image = "localhost/rollhub-repair-test"
    podman("build", "--network", "none", "--build-arg", f"BASE={base}", "-t", image,
           str(REPAIR), timeout=600)
    options: dict[str, Any] = {"docker": podman.executable,
                               "cli_env": {"CONTAINERS_CONF": podman.env["CONTAINERS_CONF"]}}
    probe = podman("run", "--rm", "--init", image, "true", check=False, timeout=120)
    if "container-init binary not found" in probe.stderr:
        options["init"] = False
    return options, image


def test_the_podman_image_variant_runs_episodes_in_containers(
    repair_image: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    options, image = repair_image
    worker_env = (f'{{ REPAIR_SANDBOX_PROVIDER = "docker", REPAIR_SANDBOX_IMAGE = "{image}", '
                  f"REPAIR_SANDBOX_OPTIONS = '{json.dumps(options)}' }}")
    env = {**os.environ, "ROLLHUB_STORE__URL": f'"file://{tmp_path / "store"}"',
           "ROLLHUB_EXPERIMENT__DATASET": '"data/smoke.jsonl"',
           "ROLLHUB_TOKEN_SOURCE__POLICY__MAX_TURNS": SHORT["ROLLHUB_TOKEN_SOURCE__POLICY__MAX_TURNS"],
           "ROLLHUB_RUNTIME__ENV": worker_env}
    out = subprocess.run(
        [str(ROLLHUB), "run", str(REPAIR / "rollouts.toml"), "--run-dir", str(tmp_path / "run"),
         "--max-prompts", "2", "--n-samples", "2", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = read_rows(tmp_path / "run" / "episodes.jsonl")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
    for row in rows:
        result = _result(row)
        assert result["metrics"]["sandbox"] == "docker"
        assert row["reward"] == (1.0 if result["check"]["exit_code"] == 0 else 0.0)
    # every container was removed with its episode
    left = subprocess.run([options["docker"], "ps", "-aq", "--filter", "label=io.rollhub.sandbox"],
                          env={**os.environ, **options["cli_env"]}, capture_output=True,
                          text=True, check=False)
    assert left.stdout.strip() == ""

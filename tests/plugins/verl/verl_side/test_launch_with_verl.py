"""``rollhub verl`` against installed verl: config check, Hydra overrides, the example.

The command's overrides (the example's as written, plus the agent-loop entry) are composed
with verl's own ``ppo_trainer`` config and validated by verl's ``validate_config``, as
``verl.trainer.main_ppo.main`` does before it starts Ray; then the entry is loaded and
instantiated as each agent-loop worker does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from rollhub.commands import config as config_command
from rollhub.config import load_config
from rollhub_verl.launch import agent_loop_entry, build_command

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "verl" / "rollhub.toml"


def compose(overrides: list[str]):
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def test_config_check_passes_with_verl_installed(capsys):
    assert config_command.run(argparse.Namespace(file=str(EXAMPLE))) == 0
    assert "trainer=verl" in capsys.readouterr().out


def test_rollhub_verl_dry_run_prints_the_trainer_command(capsys, tmp_path):
    from rollhub.cli import main

    args = ["verl", str(EXAMPLE), "trainer.total_training_steps=1", "--run-dir", str(tmp_path)]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "-m verl.trainer.main_ppo" in out
    assert f"agent_loop_config_path={tmp_path / 'agent_loops.yaml'}" in out
    assert out.rstrip().endswith("trainer.total_training_steps=1")


def test_example_command_is_a_valid_verl_config(tmp_path: Path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    yaml = tmp_path / "agent_loops.yaml"
    cmd = build_command(load_config(EXAMPLE), EXAMPLE, yaml, ["trainer.total_training_steps=1"])
    assert cmd[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    config = compose(cmd[3:])
    validate_config(
        config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    agent = config.actor_rollout_ref.rollout.agent
    assert agent.agent_loop_config_path == str(yaml) and agent.default_agent_loop == "rollhub"
    assert config.data.train_files == str(EXAMPLE.parent / "data" / "gsm8k" / "train.parquet")
    assert config.algorithm.adv_estimator == "grpo" and config.trainer.use_v1 is True
    assert config.actor_rollout_ref.rollout.calculate_log_probs is True


def test_agent_loop_entry_instantiates_as_a_worker_does(tmp_path, verl_config, stack):
    import hydra
    from omegaconf import OmegaConf
    from rollhub_verl.agent_loop import RollhubAgentLoop
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    toml = tmp_path / "rollhub.toml"
    toml.write_text('[token_source]\nname = "gateway"\n[trainer]\nname = "verl"\n')
    config = verl_config(toml)
    (tmp_path / "agent_loops.yaml").write_text(agent_loop_entry("rollhub", toml))
    # AgentLoopWorker.__init__: each entry of the file goes into the registry by name
    for entry in OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path):
        _agent_loop_registry[entry.name] = entry
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry["rollhub"],
        trainer_config=DictConfigWrap(config=config),
        server_manager=stack.client,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="qwen2",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, RollhubAgentLoop)
    assert loop.rollhub_config == str(toml.resolve())
    assert loop.budget.prompt_length == config.actor_rollout_ref.rollout.prompt_length


def _gpu_step_missing() -> str | None:
    """Why one GRPO step cannot run here (None: it can)."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "needs CUDA"
    if importlib.util.find_spec("vllm") is None:
        return "needs vLLM (verl's rollout engine)"
    return None


@pytest.mark.skipif(
    _gpu_step_missing() is not None,
    reason=f"{_gpu_step_missing()}: one GRPO step of Qwen2.5-0.5B-Instruct through rollhub verl; "
    "run it on a GPU machine as documented in docs/backends/verl.md and docs/gpu-checks.md",
)
def test_one_grpo_step_on_gpu(tmp_path: Path):
    import subprocess

    # the step's overrides and the parser of verl's console lines, shared with the GPU checks
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    from gpucheck.verl_step import STEP_OVERRIDES, parse_steps, step_problems

    data = tmp_path / "data"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "verl" / "prepare_data.py"), "--synthetic",
         "256", "--out", str(data)], check=True,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "rollhub_verl.launch", str(EXAMPLE), *STEP_OVERRIDES,
         f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]
    steps = parse_steps(out)
    assert step_problems(steps, 1) == [], (steps, out[-4000:])
    assert steps[1].get("timing_s/step", 0) > 0, steps[1]

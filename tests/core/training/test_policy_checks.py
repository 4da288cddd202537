"""``[[policies]]`` that cannot run are refused at ``rollhub config check``, with the
reason: backends that train one model, token sources that cannot route, a trainable policy
with weights, a trainable judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rollhub.commands.checks import check_run_config
from rollhub.config import parse_config
from rollhub.errors import ConfigError

AGENT = Path(__file__).parent / "agents" / "two_policy_agent.py"
POLICIES = [{"name": "proposer"}, {"name": "checker"}, {"name": "judge", "trainable": False}]


def _config(tmp_path: Path, **sections: Any) -> Any:
    data = {
        "experiment": {"output_dir": str(tmp_path / "runs")},
        "runtime": {"name": "local", "app": f"{AGENT}:app"},
        "store": {"url": f"file://{tmp_path / 'store'}"},
        "token_source": {"name": "gateway"},
        "trainer": {"name": "torch"},
        "policies": POLICIES,
        **sections,
    }
    return parse_config(data, env={})


@pytest.mark.parametrize(
    ("trainer", "reason"),
    [
        ("trl", "TRL's GRPOTrainer drives the loop with one model and one optimizer"),
        ("verl", "verl's PPO loop trains one actor model"),
        ("slime", "slime's loop trains one Megatron actor"),
        ("rllm", "rLLM's trainer trains one actor from these episodes"),
        ("tinker", "a training and a sampling client per policy are not wired"),
    ],
)
def test_backends_that_train_one_model_are_refused_with_the_reason(tmp_path, trainer, reason):
    cfg = _config(tmp_path, trainer={"name": trainer})
    with pytest.raises(ConfigError) as err:
        check_run_config(cfg)
    message = str(err.value)
    assert f"trainer {trainer!r} cannot train several [[policies]]" in message
    assert reason in message
    assert err.value.context["field"] == "trainer.name"


def test_the_torch_trainer_and_the_export_consumer_pass(tmp_path):
    check_run_config(_config(tmp_path))
    check_run_config(_config(tmp_path, trainer={"name": "export"}))


def test_a_policys_own_trainer_options_are_validated(tmp_path):
    policies = [{"name": "proposer", "trainer": {"learning_rate": -1}}, {"name": "checker"}]
    with pytest.raises(ConfigError, match=r"policies\.proposer\.trainer\.learning_rate"):
        check_run_config(_config(tmp_path, policies=policies))


def test_a_token_source_that_cannot_route_is_refused(tmp_path):
    with pytest.raises(
        ConfigError, match="routes each call by its model name: token_source 'none'"
    ):
        check_run_config(_config(tmp_path, token_source={"name": "none"}))


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"url": "http://127.0.0.1:9", "admin_token": "x"}, "token_source.url", "remote gateway"),
        ({"pool": {"replicas": 2}}, "token_source.pool", "replicas"),
        ({"policies": [{"name": "a"}]}, "token_source.policies", "given twice"),
    ],
)
def test_gateway_settings_that_cannot_serve_policies_are_refused(tmp_path, options, field, words):
    with pytest.raises(ConfigError) as err:
        check_run_config(_config(tmp_path, token_source={"name": "gateway", **options}))
    assert err.value.context["field"] == field and words in str(err.value)


def test_a_trainable_policy_starts_from_the_served_model(tmp_path):
    policies = [{"name": "proposer", "weights": "policy.safetensors"}]
    with pytest.raises(ConfigError, match="trainable and has weights"):
        check_run_config(_config(tmp_path, policies=policies))


def test_policy_names_and_model_ids_are_unique():
    with pytest.raises(ConfigError, match=r"policies\[1\] has the model id 'x' of policies\[0\]"):
        parse_config({"policies": [{"name": "a", "model_id": "x"}, {"name": "x"}]}, env={})
    with pytest.raises(ConfigError, match="must be 1-64 letters"):
        parse_config({"policies": [{"name": "a/b"}]}, env={})
    # an agent asking for "checker" would reach critic
    with pytest.raises(ConfigError, match=r"model id 'checker', the name of policies\[0\]"):
        parse_config({"policies": [{"name": "checker", "model_id": "chk"},
                                   {"name": "critic", "model_id": "checker"}]}, env={})  # fmt: skip


def test_the_judge_must_be_a_frozen_policy(tmp_path):
    with pytest.raises(ConfigError, match=r"judge\.policy = 'checker' is trainable"):
        check_run_config(_config(tmp_path, judge={"policy": "checker"}))
    with pytest.raises(ConfigError, match="'critic' is not a \\[\\[policies\\]\\] entry"):
        check_run_config(_config(tmp_path, judge={"policy": "critic"}))
    check_run_config(_config(tmp_path, judge={"policy": "judge"}))
    with pytest.raises(ConfigError, match=r"either policy .* or base_url"):
        parse_config({"judge": {"policy": "judge", "base_url": "http://x/v1"}}, env={})


def test_a_frozen_policys_weights_file_must_exist(tmp_path):
    # said at config check, not when the gateway loads it after the run directory exists
    policies = [*POLICIES[:2], {"name": "critic", "trainable": False, "weights": "gone.safetensors"}]
    with pytest.raises(ConfigError) as err:
        check_run_config(_config(tmp_path, policies=policies))
    assert err.value.context["field"] == "policies.critic.weights"
    assert "gone.safetensors" in str(err.value) and "does not exist" in str(err.value)
    (tmp_path / "here.safetensors").write_bytes(b"")
    policies[2]["weights"] = str(tmp_path / "here.safetensors")
    check_run_config(_config(tmp_path, policies=policies))

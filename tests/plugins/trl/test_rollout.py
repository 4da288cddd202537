"""The rollout function's conversion rules and the trainer's config checks (no training).

The hub side runs for real: a started :class:`~rollhub.hubs.async_hub.AsyncHub` with the in-process
runtime and a scripted agent, called from another thread the way TRL calls
``rollout_func``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from rollhub.episode import Episode
from rollhub.errors import ConfigError, RollhubError
from rollhub.registry import ComponentContext
from rollhub.trace import TraceRecord, TurnSpan
from rollhub_trl.rollout import (
    HubRollout,
    _runs,
    as_prompt,
    episode_sample,
    payload_of,
    rollhub_reward,
)
from rollhub_trl.trainer import TrlTrainer, TrlTrainerOptions

EOS = 2


def _record(prompt: list[int], response: list[int], mask: list[int], version: int = 0,
            branch: int = 0) -> TraceRecord:
    return TraceRecord(
        session_id="s", branch_id=branch, prompt_ids=prompt, response_ids=response,
        response_mask=mask,
        response_logprobs=[-0.5 if m else 0.0 for m in mask],
        turns=[TurnSpan(turn_index=0, start=0, end=len(response), weight_version=version)],
    )


def _episode(status: str = "ok", reward: float | None = 1.0, traces: list[TraceRecord] | None = None,
             trainable: bool = True) -> Episode:
    e = Episode("e", "g", "s", 0, status, reward=reward, traces=traces or [])  # type: ignore[arg-type]
    e.trainable = trainable
    return e


def test_a_multi_turn_episode_keeps_its_ids_logprobs_and_mask() -> None:
    rec = _record([5, 6, 7], [10, 11, 90, 91, 12, EOS], [1, 1, 0, 0, 1, 1])
    s = episode_sample(_episode(traces=[rec]), EOS)
    assert s.prompt_ids == [5, 6, 7] and s.completion_ids == [10, 11, 90, 91, 12, EOS]
    assert s.env_mask == [1, 1, 0, 0, 1, 1]  # the tool reply (90, 91) is not trained
    assert s.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5, -0.5]
    assert s.reward == 1.0 and s.records_dropped == 0


def test_a_fork_gives_trl_its_last_record_and_counts_the_others() -> None:
    first = _record([5, 6], [10, EOS], [1, 1])
    last = _record([5, 8], [12, 13, EOS], [1, 1, 1], branch=1)
    s = episode_sample(_episode(traces=[first, last]), EOS)
    assert s.prompt_ids == [5, 8] and s.completion_ids == [12, 13, EOS]
    assert s.records_dropped == 1


@pytest.mark.parametrize(
    ("episode", "reward"),
    [
        (_episode(status="agent_error", reward=None, trainable=False), None),
        # excluded by the failure policy (e.g. drop_group): no baseline, no gradient
        (_episode(reward=1.0, traces=[_record([5], [9, EOS], [1, 1])], trainable=False), None),
        # zero_reward: a failed episode counts in the baseline with 0 but never trains
        (_episode(status="timeout", reward=0.0, traces=[_record([5], [9], [1])]), 0.0),
        (_episode(reward=1.0, traces=[]), 1.0),  # no token capture: nothing to train on
    ],
)
def test_an_episode_that_may_not_train_is_a_masked_filler(episode: Episode, reward: Any) -> None:
    s = episode_sample(episode, EOS)
    assert s.prompt_ids == [EOS] and s.completion_ids == [EOS] and s.env_mask == [0]
    assert s.reward == reward


def test_a_record_whose_arrays_disagree_is_refused() -> None:
    rec = _record([5], [9, 10], [1, 1])
    rec.response_logprobs = [-0.1]
    with pytest.raises(RollhubError, match="must align"):
        episode_sample(_episode(traces=[rec]), EOS)


def test_runs_of_equal_prompts_are_groups() -> None:
    a, b = as_prompt({"id": "a", "q": 1}), as_prompt({"q": 2, "id": "b"})
    assert _runs([a, a, a, b, b, a]) == [({"id": "a", "q": 1}, 3), ({"id": "b", "q": 2}, 2),
                                         ({"id": "a", "q": 1}, 1)]
    # one row at the end of an epoch and at the start of the next: two groups of TRL's size
    assert _runs([b, b, b, b], size=2) == [({"id": "b", "q": 2}, 2)] * 2
    assert payload_of({"id": "x"}) == {"id": "x"}
    with pytest.raises(RollhubError, match="not a rollhub dataset row"):
        payload_of("What is 2 + 2?")


def test_the_reward_function_hands_trl_the_episode_rewards() -> None:
    assert rollhub_reward(["p"] * 3, ["c"] * 3, rollhub_reward=[1.0, None, 0.0]) == [1.0, None, 0.0]


class _Hub:
    """The two things the rollout function uses of a hub, recording the calls."""

    def __init__(self) -> None:
        self.weight_version = 3
        self.calls: list[tuple[dict[str, Any], int, str]] = []

    async def run_group(self, payload: dict[str, Any], n: int) -> Any:
        from rollhub.episode import EpisodeGroup

        self.calls.append((payload, n, threading.current_thread().name))
        episodes = []
        for i in range(n):
            rec = _record([1, 2], [3 + i, EOS], [1, 1], version=3)
            episodes.append(Episode(f"{payload['id']}-{i}", payload["id"], f"s{i}", i, "ok",
                                    reward=float(i % 2), traces=[rec]))
        return EpisodeGroup(payload["id"], payload, episodes)


def test_the_rollout_function_runs_groups_on_the_hubs_loop_from_trls_thread() -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="hub-loop", daemon=True)
    thread.start()
    hub = _Hub()

    class Model:
        training = True

        def eval(self) -> None:
            Model.training = False
            assert not hub.calls  # sampling starts in eval mode

        def train(self, mode: bool = True) -> None:
            Model.training = mode

    class State:
        global_step = 3

    class Trainer:
        state = State()

    try:
        rollout = HubRollout(hub, loop, filler_id=EOS, sampling_model=Model)
        a, b = as_prompt({"id": "a"}), as_prompt({"id": "b"})
        out = rollout([a, a, b, b], Trainer())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert [(p["id"], n, t) for p, n, t in hub.calls] == [("a", 2, "hub-loop"), ("b", 2, "hub-loop")]
    assert Model.training is True  # TRL's mode restored
    assert out["completion_ids"] == [[3, EOS], [4, EOS], [3, EOS], [4, EOS]]
    assert out["env_mask"] == [[1, 1]] * 4 and out["rollhub_reward"] == [0.0, 1.0, 0.0, 1.0]
    assert out["rollhub_episode_id"] == ["a-0", "a-1", "b-0", "b-1"]
    pending = rollout.pending[-1]
    assert pending.batch.step == 3 and pending.batch.weight_version == 3
    assert pending.metrics["episodes"] == 4 and pending.metrics["trained_tokens"] == 8
    rollout.stopping = True
    with pytest.raises(RollhubError, match="stopping"):
        rollout([a], Trainer())


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("num_generations = 4", "num_generations is set by rollhub from experiment.n_samples"),
        ("learning_rate = 1.0", "learning_rate is set by rollhub from trainer.learning_rate"),
        ('output_dir = "/tmp/x"', "output_dir is set by rollhub from the run directory"),
        ("num_iterations = 2", "num_iterations must be 1"),
        # caught at the check, not when TRL builds its GRPOConfig after the run directory
        ("los_type = 1", "los_type is not a field of TRL's GRPOConfig (did you mean 'loss_type'?)"),
    ],
)
def test_config_check_refuses_what_rollhub_sets_in_trainer_args(
    arg: str, says: str, tmp_path, capsys
) -> None:
    from pathlib import Path

    from rollhub.cli import main

    math = Path(__file__).resolve().parents[3] / "examples" / "math"
    toml = tmp_path / "rollhub.toml"
    toml.write_text(
        f'[experiment]\nname = "x"\ndataset = "{math / "data" / "calc-train.jsonl"}"\n'
        f'[runtime]\nname = "local"\napp = "{math / "calc_agent.py"}:app"\n'
        f'[trainer]\nname = "trl"\n[trainer.args]\nbeta = 0.0\n{arg}\n'
    )
    assert main(["config", "check", str(toml)]) != 0
    err = capsys.readouterr().err
    assert "trainer.args" in err and says in err, err
    toml.write_text(toml.read_text().replace(arg, ""))
    assert main(["config", "check", str(toml)]) == 0


def _cfg(**env: str) -> Any:
    from pathlib import Path

    from rollhub.config import load_config

    root = Path(__file__).resolve().parents[3]
    return load_config(root / "examples" / "math" / "train-trl.toml",
                       env={f"ROLLHUB_{k}": v for k, v in env.items()})


def test_the_grpo_config_follows_the_rollhub_config(tmp_path) -> None:
    cfg = _cfg()
    trainer = TrlTrainer(TrlTrainerOptions(learning_rate=3e-5, args={"beta": 0.04, "epsilon": 0.3}),
                         context=ComponentContext(exp_id="x", config=cfg))
    args = trainer.grpo_config(cfg, tmp_path, total_steps=10)
    assert (args.num_generations, args.per_device_train_batch_size) == (8, 8)
    assert args.gradient_accumulation_steps == args.steps_per_generation == 4
    assert args.max_steps == 10 and args.learning_rate == 3e-5 and args.temperature == 0.7
    assert (args.beta, args.epsilon, args.loss_type) == (0.04, 0.3, "dapo")
    assert args.output_dir == str(tmp_path / "trl") and not args.use_vllm
    # the run keeps training.keep_checkpoints of TRL's checkpoints (it kept every one)
    assert args.save_total_limit == cfg.training.keep_checkpoints == 2
    cfg = _cfg(TRAINING__KEEP_CHECKPOINTS="5")
    assert trainer.grpo_config(cfg, tmp_path, total_steps=10).save_total_limit == 5
    with pytest.raises(ValueError, match=r"save_total_limit is set by rollhub from "
                                         r"training\.keep_checkpoints"):
        TrlTrainerOptions(args={"save_total_limit": 3})
    # training.shuffle reaches TRL's prompt sampler (it shuffled whatever was set)
    assert args.shuffle_dataset is True
    cfg = _cfg(TRAINING__SHUFFLE="false")
    assert trainer.grpo_config(cfg, tmp_path, total_steps=10).shuffle_dataset is False
    with pytest.raises(ValueError, match=r"shuffle_dataset is set by rollhub from "
                                         r"training\.shuffle"):
        TrlTrainerOptions(args={"shuffle_dataset": False})


def test_an_argument_trl_refuses_names_trainer_args(tmp_path) -> None:
    cfg = _cfg()
    trainer = TrlTrainer(TrlTrainerOptions(args={"lr_scheduler_type": "nope"}),
                         context=ComponentContext(exp_id="x", config=cfg))
    with pytest.raises(ConfigError, match="nope is not a valid SchedulerType") as err:
        trainer.grpo_config(cfg, tmp_path, total_steps=1)
    assert err.value.field == "trainer.args"
    # a key that is no field at all is refused with the options, before anything runs
    with pytest.raises(ValueError, match="no_such_field is not a field of TRL's GRPOConfig"):
        TrlTrainerOptions(args={"no_such_field": 1})


@pytest.mark.parametrize(
    ("setting", "field", "says"),
    [
        ('stratify = "level"', "training.stratify",
         "TRL's GRPOTrainer draws each step's prompts itself"),
        ("max_staleness = 1", "experiment.max_staleness",
         "TRL's GRPOTrainer samples and trains on-policy"),
    ],
)
def test_config_check_refuses_core_loop_settings_trls_loop_cannot_honour(
    setting: str, field: str, says: str, tmp_path, capsys
) -> None:
    # they were accepted, and the run silently did without them
    from pathlib import Path

    from rollhub.cli import main

    math = Path(__file__).resolve().parents[3] / "examples" / "math"
    data = tmp_path / "calc.jsonl"
    data.write_text("".join(
        line[:-2] + ', "level": "easy"}\n'
        for line in (math / "data" / "calc-train.jsonl").read_text().splitlines(keepends=True)
    ))
    section = "training" if field.startswith("training") else "experiment"
    toml = tmp_path / "rollhub.toml"
    body = (
        f'[experiment]\nname = "x"\ndataset = "{data}"\n'
        f'[runtime]\nname = "local"\napp = "{math / "calc_agent.py"}:app"\n'
        f'[trainer]\nname = "trl"\n[training]\nbatch_groups = 2\n'
    )
    toml.write_text(body.replace(f"[{section}]\n", f"[{section}]\n{setting}\n"))
    assert main(["config", "check", str(toml)]) != 0
    err = capsys.readouterr().err
    assert field in err and says in err, err
    toml.write_text(body)
    assert main(["config", "check", str(toml)]) == 0


def test_a_group_of_one_is_refused(tmp_path) -> None:
    cfg = _cfg(EXPERIMENT__N_SAMPLES="1")
    trainer = TrlTrainer(TrlTrainerOptions(), context=ComponentContext(exp_id="x", config=cfg))
    with pytest.raises(ConfigError, match="at least 2") as err:
        trainer.grpo_config(cfg, tmp_path, total_steps=1)
    assert err.value.field == "experiment.n_samples"


def test_rollhub_plugins_lists_the_trl_trainer_and_its_options(capsys) -> None:
    import json

    from rollhub.cli import main

    assert main(["plugins"]) == 0
    assert any(line.split()[:3] == ["trainer", "trl", "trl"]
               for line in capsys.readouterr().out.splitlines())
    assert main(["plugins", "trainer", "trl", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["distribution"] == "rollhub-trl"
    options = {o["name"]: o for o in listing["options"]}
    assert {"model", "learning_rate", "train_layers", "use_vllm", "threads", "args"} <= set(options)
    assert options["learning_rate"]["default"] == 1e-5 and options["train_layers"]["default"] == 8
    assert "GRPOConfig" in options["args"]["description"]
    assert main(["plugins", "trainer"]) == 2
    assert "rollhub plugins trainer " in capsys.readouterr().err
    assert main(["plugins", "trainer", "nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_a_misspelt_engine_option_is_refused_not_trained_past() -> None:
    """TRL trains the model the gateway samples; a misspelt engine option used to be read
    past (SmolLM2 trained beside a gateway that refused the config), now it names the key."""
    import tomllib
    from pathlib import Path

    from rollhub.config import parse_config

    root = Path(__file__).resolve().parents[3]
    raw = tomllib.loads((root / "examples" / "math" / "train-trl.toml").read_text())
    raw["token_source"]["engine"]["options"]["modle"] = "/models/other"
    cfg = parse_config(raw, env={}, base_dir=root / "examples" / "math")
    trainer = TrlTrainer(TrlTrainerOptions(), context=ComponentContext(exp_id="x", config=cfg))
    with pytest.raises(ConfigError, match="modle") as err:
        trainer._load_model(cfg)
    assert err.value.field == "token_source.engine.options.modle"

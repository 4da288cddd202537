"""Each field of slime's ``EvalDatasetConfig`` honoured (metadata, sampling) or refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from rollhub.errors import ConfigError
from rollhub_slime.eval_data import eval_groups
from rollhub_slime.eval_options import (
    HONOURED,
    NOT_READ,
    REFUSED,
    SAMPLING_KEYS,
    check_eval_dataset,
    eval_metadata,
    eval_sampling,
)
from rollhub_slime.rollout import eval_rollout
from rollhub_slime.step_hooks import StepHooks, check_slime_flags

from tests.plugins.slime.slime_stand_ins import RECORD, make_args


def dataset(**fields):
    from slime.utils.eval_config import EvalDatasetConfig

    return EvalDatasetConfig(**{"name": "mini", "path": "/nowhere.jsonl", **fields})


def test_every_recorded_field_is_honoured_refused_or_not_read():
    fields = RECORD["eval_dataset_config_fields"]
    groups = [set(HONOURED), set(SAMPLING_KEYS), set(REFUSED), set(NOT_READ)]
    assert sum(len(g) for g in groups) == len(fields)
    assert set().union(*groups) == set(fields)


def test_metadata_gets_rm_type_and_overrides_as_slime_injects_them():
    cfg = dataset(rm_type="math", metadata_overrides={"mode": "tool", "label": "x"})
    row = {"id": "e1", "mode": "plain", "rm_type": "f1"}
    assert eval_metadata(cfg, row) == {"id": "e1", "mode": "tool", "rm_type": "math", "label": "x"}
    assert eval_metadata(cfg, row) == cfg.inject_metadata(row)  # the recorded behaviour
    assert row == {"id": "e1", "mode": "plain", "rm_type": "f1"}  # a copy
    for odd in (None, "text", ["a"]):
        assert eval_metadata(cfg, odd) == cfg.inject_metadata(odd)
    assert eval_metadata(dataset(), {"id": 1}) == {"id": 1}  # nothing set: unchanged


def test_eval_groups_inject_the_metadata_into_every_copy(tmp_path):
    from slime.utils.types import Sample

    data = tmp_path / "eval.jsonl"
    data.write_text(json.dumps({"input": "q", "metadata": {"id": "e1"}}) + "\n")
    cfg = dataset(path=str(data), n_samples_per_eval_prompt=2, rm_type="math",
                  metadata_overrides={"tools": ["add"]})  # fmt: skip
    [group] = eval_groups(cfg, make_args(), Sample)
    assert [s.metadata for s in group] == [{"id": "e1", "rm_type": "math", "tools": ["add"]}] * 2
    group[0].metadata["tools"].append("mul")  # each copy owns its metadata
    assert group[1].metadata["tools"] == ["add"]


def test_sampling_fields_become_rollhub_sampling_keys():
    cfg = dataset(temperature=0.0, top_p=0.9, top_k=20, max_response_len=256, stop=["</s>"])
    assert eval_sampling(cfg) == {
        "temperature": 0.0,
        "top_p": 0.9,
        "top_k": 20,
        "max_tokens": 256,
        "stop": ["</s>"],
    }
    assert eval_sampling(dataset()) == {}
    assert eval_sampling(dataset(stop="\n\n")) == {"stop": ["\n\n"]}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("custom_generate_function_path", "pkg.gen"),
        ("app_service", "http://localhost:18080"),
        ("message_processor", {"name": "chat"}),
        ("reward_model", {"type": "remote"}),
        ("remote_environment", {"url": "http://env"}),
        ("custom_rm_path", "pkg.rm"),
        ("stop_token_ids", [2]),
        ("min_new_tokens", 4),
        ("repetition_penalty", 1.05),
        ("skip_special_tokens", True),
        ("no_stop_trim", False),
        ("multimodal_keys", {"image": "img"}),
        ("apply_chat_template_kwargs", {"enable_thinking": False}),
        ("eval_task_timeout", 120),
        ("eval_early_stop_remaining", 3),
        ("eval_early_stop_idle_timeout", 30.0),
    ],
)
def test_fields_rollhub_cannot_honour_are_refused(field, value):
    with pytest.raises(ConfigError, match=rf"eval dataset 'mini' sets {field}=") as err:
        check_eval_dataset(dataset(**{field: value}))
    assert err.value.field == f"eval_datasets.mini.{field}"
    if field in ("custom_generate_function_path", "reward_model", "custom_rm_path"):
        assert "computes its reward" in str(err.value)
        assert "metadata_overrides" in str(err.value)


def test_unset_and_honoured_fields_pass():
    check_eval_dataset(dataset())
    honoured = dataset(rm_type="math", metadata_overrides={"a": 1}, temperature=0.0, top_k=-1,
                       stop=["x"], min_eval_samples=4, tool_key="tools", apply_chat_template=True,
                       apply_chat_template_kwargs={}, reward_model={})  # fmt: skip
    check_eval_dataset(honoured)


def test_eval_rollout_refuses_before_any_rollout_runs():
    ok = dataset(name="ok", temperature=0.0)
    bad = dataset(name="bad", custom_generate_function_path="pkg.gen")
    args = make_args(eval_datasets=[ok, bad])
    # no hub is needed: the check comes first, so nothing of "ok" ran either
    with pytest.raises(ConfigError, match="eval dataset 'bad' sets custom_generate_function"):
        asyncio.run(eval_rollout(None, None, args, 0))  # type: ignore[arg-type]


def test_launch_check_refuses_eval_fields_and_custom_rm_path_in_rollout_mode():
    bad = make_args(eval_datasets=[dataset(eval_task_timeout=60)])
    with pytest.raises(ConfigError, match=r"eval_task_timeout=60.*\[experiment\] timeout_s"):
        StepHooks.from_args(bad)
    rm = make_args(custom_rm_path="pkg.rm", eval_datasets=[dataset(custom_rm_path="pkg.rm")])
    with pytest.raises(ConfigError, match=r"--custom-rm-path pkg\.rm is set") as err:
        StepHooks.from_args(rm)
    assert err.value.field == "custom_rm_path"
    # the generate-function mode keeps slime's loop, eval and reward model: not refused there
    check_slime_flags(bad)
    check_slime_flags(rm)

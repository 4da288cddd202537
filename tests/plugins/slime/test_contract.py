"""rollhub-slime against slime's contracts, as recorded from THUDM/slime@624b824.

``slime_624b824.json`` holds facts read from slime's source at that commit: the ``Sample``
dataclass (field names, annotations, defaults, order, ``Status`` values), the rollout
function outputs, the hook signatures and the argument names rollhub-slime writes. The
stand-in package the other tests import must match the record, and so must this package's
hook functions, so a test passing here means the same code meets the real types.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import json
import sys
from typing import Any

import pytest
import rollhub_slime
from rollhub_slime import rewards, rollout
from rollhub_slime.eval_data import eval_groups
from rollhub_slime.launch import slime_arguments
from rollhub_slime.router import ROUTING_HEADER, SlimeRouterOptions
from rollhub_slime.runner import CONFIG_ARG

from tests.plugins.slime.slime_stand_ins import RECORD, make_args

#: a real slime installation (GPU machines); looked up before the stand-in is put on sys.path
REAL_SLIME = importlib.util.find_spec("slime")


def test_record_is_of_the_commit_the_package_targets():
    assert RECORD["commit"] == rollhub_slime.SLIME_COMMIT


def _default(f: dataclasses.Field, owner: type) -> str | None:
    """A field's default written the way the record writes slime's source."""
    if f.default_factory is not dataclasses.MISSING:
        factory = f.default_factory
        name = factory.__name__ if factory in (list, dict) else factory.__qualname__.split(".")[-1]
        return f"field(default_factory={name})"
    if f.default is dataclasses.MISSING:
        return None
    if isinstance(f.default, owner.Status if hasattr(owner, "Status") else ()):
        return f"Status.{f.default.name}"
    return repr(f.default)


def _fields(cls: type) -> list[list[Any]]:
    return [[f.name, f.type, _default(f, cls)] for f in dataclasses.fields(cls)]


def test_stand_in_sample_matches_the_record():
    from slime.utils.types import Sample

    assert _fields(Sample) == RECORD["sample"]["fields"]
    assert [[m.name, m.value] for m in Sample.Status] == RECORD["sample"]["status"]


def test_stand_in_rollout_outputs_match_the_record():
    from slime.rollout.base_types import RolloutFnEvalOutput, RolloutFnTrainOutput

    assert _fields(RolloutFnTrainOutput) == RECORD["rollout_fn_train_output"]["fields"]
    assert _fields(RolloutFnEvalOutput) == RECORD["rollout_fn_eval_output"]["fields"]


def test_rollout_function_signature():
    hook = RECORD["hooks"]["rollout_function"]
    sig = inspect.signature(rollout.generate_rollout)
    assert list(sig.parameters) == hook["params"]
    assert {k: sig.parameters[k].default for k in hook["defaults"]} == hook["defaults"]
    assert inspect.iscoroutinefunction(rollout.generate_rollout) is hook["async"]


def test_custom_generate_function_signature():
    hook = RECORD["hooks"]["custom_generate_function"]
    sig = inspect.signature(rollout.generate)
    names = list(sig.parameters)
    assert names[: len(hook["params"])] == hook["params"]
    # slime passes evaluation= only when the signature names it; it must have a default
    assert hook["optional_keyword"] in names
    assert sig.parameters[hook["optional_keyword"]].default is False
    assert inspect.iscoroutinefunction(rollout.generate) is hook["async"]


def test_reward_post_process_signature():
    hook = RECORD["hooks"]["custom_reward_post_process"]
    assert list(inspect.signature(rewards.post_process_rewards).parameters) == hook["params"]


class RecordedEvalConfig:
    """An eval dataset config with exactly the recorded fields (all unset); it notes which
    ones are read, and reading any other is an ``AttributeError``."""

    def __init__(self, **values: Any) -> None:
        self.__dict__["values"] = dict.fromkeys(RECORD["eval_dataset_config_fields"])
        self.__dict__["read"] = set()
        self.values.update(values)

    def __getattr__(self, name: str) -> Any:
        if name not in self.values:
            raise AttributeError(f"slime's EvalDatasetConfig has no field {name!r}")
        self.read.add(name)
        return self.values[name]


def test_eval_dataset_fields_read_exist(tmp_path):
    from slime.utils.types import Sample

    data = tmp_path / "eval.jsonl"
    data.write_text(json.dumps({"input": "q", "label": "a", "metadata": {"id": 1}}) + "\n")
    cfg = RecordedEvalConfig(name="mini", path=str(data))
    [[prompt]] = eval_groups(cfg, make_args(label_key="label"), Sample)
    assert (prompt.prompt, prompt.label, prompt.metadata) == ("q", "a", {"id": 1})
    assert cfg.read >= {"name", "path", "n_samples_per_eval_prompt", "input_key", "label_key"}


def test_stand_in_eval_dataset_config_matches_the_record():
    from slime.utils.eval_config import EvalDatasetConfig

    names = [f.name for f in dataclasses.fields(EvalDatasetConfig)]
    assert names == RECORD["eval_dataset_config_fields"]


def test_eval_options_read_only_recorded_fields():
    from rollhub_slime.eval_options import check_eval_dataset, eval_metadata, eval_sampling

    cfg = RecordedEvalConfig(name="mini", path="x.jsonl", metadata_overrides={})
    check_eval_dataset(cfg)
    assert eval_sampling(cfg) == {}
    assert eval_metadata(cfg, {"id": 1}) == {"id": 1}
    assert {"rm_type", "metadata_overrides", "temperature", "custom_rm_path"} <= cfg.read


def test_router_policy_from_the_record_sends_the_recorded_header():
    facts = RECORD["router"]
    options = SlimeRouterOptions(router_policy=facts["router_policy"])
    assert options.routing_key_header == ROUTING_HEADER == facts["routing_header"]
    assert SlimeRouterOptions(router_policy="round_robin").routing_key_header is None


def test_written_arguments_are_slime_arguments(tmp_path):
    from rollhub.config import parse_config

    cfg = parse_config(
        {
            "experiment": {
                "sampling": {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_tokens": 64}
            },
            "token_source": {
                "name": "gateway",
                "engine": {
                    "name": "slime-router",
                    "options": {"router_policy": "consistent_hashing"},
                },
            },
            "trainer": {"name": "slime"},
        },
        env={},
    )
    for mode in ("rollout", "generate"):
        args = slime_arguments(cfg, tmp_path / "c.yaml", mode=mode)
        flags = [a for a in args if a.startswith("--")]
        assert flags and set(flags) <= set(RECORD["arguments"])
    assert CONFIG_ARG not in RECORD["args_attributes"]  # our own attribute cannot clash


@pytest.mark.skipif(
    REAL_SLIME is None, reason="slime is not installed here (not on PyPI; it needs GPUs)"
)
def test_installed_slime_matches_the_record(monkeypatch):
    from tests.plugins.slime.slime_stand_ins import STUB

    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(STUB)])
    for name in [m for m in sys.modules if m == "slime" or m.startswith("slime.")]:
        monkeypatch.delitem(sys.modules, name)
    types = importlib.import_module("slime.utils.types")
    base_types = importlib.import_module("slime.rollout.base_types")
    assert [f.name for f in dataclasses.fields(types.Sample)] == [
        f[0] for f in RECORD["sample"]["fields"]
    ]
    assert [[m.name, m.value] for m in types.Sample.Status] == RECORD["sample"]["status"]
    train = [f.name for f in dataclasses.fields(base_types.RolloutFnTrainOutput)]
    assert train == [f[0] for f in RECORD["rollout_fn_train_output"]["fields"]]
    filters = importlib.import_module("slime.rollout.filter_hub.base_types")
    output = [f.name for f in dataclasses.fields(filters.DynamicFilterOutput)]
    assert output == [f[0] for f in RECORD["dynamic_filter_output"]["fields"]]

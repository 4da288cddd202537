"""slime's per-step sampling arguments: refused or loaded before any hub starts, and the
dynamic filter's keep rule. (The loop that uses them runs in ``test_rollout.py``.)"""

from __future__ import annotations

import asyncio

import pytest
from rollhub.errors import ConfigError
from rollhub.hubs.hosted import hosted_hub
from rollhub_slime import runner
from rollhub_slime.rollout import generate, generate_rollout
from rollhub_slime.step_hooks import StepHooks, filter_decision

from tests.plugins.slime.slime_stand_ins import RECORD, ListDataSource, make_args


def prompt():
    from slime.utils.types import Sample

    return Sample(prompt="x", label="5", metadata={"id": "p"})


@pytest.fixture(autouse=True)
def no_hub():
    """These arguments name no rollhub.toml: had a hub been built first, its error
    ("no rollhub.toml for slime") would have come instead of the one asserted."""
    runner.close_process_hub()
    yield
    assert hosted_hub(runner.HUB_KEY) is None


@pytest.mark.parametrize("attr", ["partial_rollout", "mask_offpolicy_in_partial_rollout"])
def test_partial_rollout_is_refused_in_both_hook_modes(attr):
    args = make_args(**{attr: True})
    with pytest.raises(ConfigError, match="drop --partial-rollout") as caught:
        generate_rollout(args, 1, ListDataSource([prompt()], 2))
    assert caught.value.field == attr
    with pytest.raises(ConfigError, match="drop --partial-rollout"):
        asyncio.run(generate(args, prompt(), {}))


def test_bad_step_arguments_are_refused():
    with pytest.raises(ConfigError, match=r"--dynamic-sampling-filter-path no_such\.f .*no_such"):
        generate_rollout(make_args(dynamic_sampling_filter_path="no_such.f"), 1, None)
    with pytest.raises(ConfigError, match=r"--rollout-sample-filter-path .* not a function"):
        generate_rollout(make_args(rollout_sample_filter_path="tests.plugins.slime.hooks.SEEN"),
                         1, None)  # fmt: skip
    small = make_args(over_sampling_batch_size=1, rollout_batch_size=2)
    with pytest.raises(ConfigError, match=r"--over-sampling-batch-size 1 .*--rollout-batch-size 2"):
        generate_rollout(small, 1, None)


def test_the_flags_read_are_slimes():
    attrs = ["over_sampling_batch_size", "dynamic_sampling_filter_path", "partial_rollout",
             "mask_offpolicy_in_partial_rollout", "rollout_sample_filter_path",
             "rollout_all_samples_process_path"]  # fmt: skip
    assert set(attrs) <= set(RECORD["args_attributes"])
    assert {"--" + a.replace("_", "-") for a in attrs} <= set(RECORD["arguments"])


def test_stand_in_filter_output_matches_the_record():
    import dataclasses

    from slime.rollout.filter_hub.base_types import DynamicFilterOutput

    fields = [[f.name, f.type, None if f.default is dataclasses.MISSING else repr(f.default)]
              for f in dataclasses.fields(DynamicFilterOutput)]  # fmt: skip
    assert fields == RECORD["dynamic_filter_output"]["fields"]


def test_the_filter_keep_rule_is_slimes():
    from slime.utils.types import Sample

    right = [Sample(reward=1.0), Sample(reward=1.0)]
    wrong = [Sample(reward=1.0), Sample(reward=0.0)]
    path = "tests.plugins.slime.hooks."
    strict = StepHooks.from_args(make_args(dynamic_sampling_filter_path=path + "keep_correct"))
    assert (strict.rollout_batch_size, strict.over_sampling_batch_size) == (2, 2)
    assert filter_decision(strict, None, right, remaining=5) == (True, None)
    assert filter_decision(strict, None, wrong, remaining=1) == (False, "wrong")
    fallback = StepHooks.from_args(
        make_args(dynamic_sampling_filter_path=path + "keep_correct_with_fallback")
    )
    assert filter_decision(fallback, None, wrong, remaining=3) == (False, "wrong")
    assert filter_decision(fallback, None, wrong, remaining=2) == (True, None)
    legacy = StepHooks.from_args(make_args(dynamic_sampling_filter_path=path + "keep_all_legacy"))
    assert filter_decision(legacy, None, wrong, remaining=0) == (True, None)
    assert filter_decision(StepHooks.from_args(make_args()), None, wrong, remaining=0) == (
        True,
        None,
    )

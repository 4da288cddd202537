"""slime's rollout hooks end to end: local runtime workers run a real agent, the in-process
gateway samples through the slime-router backend from an SGLang-shaped loopback server (a
scripted engine behind it), and episodes come back as slime Samples."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rollhub.errors import ConfigError, RolloutFailed
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_slime.rewards import post_process_rewards
from rollhub_slime.rollout import generate, generate_rollout
from rollhub_slime.router import ROUTING_HEADER
from rollhub_slime.runner import CONFIG_ENV, close_process_hub, config_for_slime, process_hub

from tests.plugins.slime.sglang_loopback import Script, serve_sglang
from tests.plugins.slime.slime_stand_ins import (
    AGENT,
    MODEL,
    RECORD,
    TEMPLATE,
    ListDataSource,
    make_args,
)

TOML = """
[experiment]
name = "slime-e2e"
n_samples = 2
concurrency = 8
timeout_s = 60
progress = false
sampling = {{ temperature = 0.7, max_tokens = 48 }}

[runtime]
name = "local"
app = "{agent}:app"
workers = 2

[store]
url = "file://{store}"

[token_source]
name = "gateway"
model = "{model}"
chat_template = "{template}"
family = "hermes"
log_turns = false
engine = {{ name = "slime-router" }}
policy = {{ max_turns = 6 }}

[trainer]
name = "slime"
"""


@pytest.fixture(scope="module")
def rollhub_toml(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("slime")
    path = tmp / "rollhub.toml"
    path.write_text(TOML.format(agent=AGENT, store=tmp / "store", model=MODEL, template=TEMPLATE))
    return path


@pytest.fixture(scope="module")
def module_sglang(tokenizer):
    """The loopback router, shared by the module's tests (as one hub serves one process)."""
    with serve_sglang(Script(tokenizer)) as state:
        yield state


@pytest.fixture
def args(module_sglang, rollhub_toml):
    port = int(module_sglang.url.rsplit(":", 1)[1])
    module_sglang.requests.clear()
    module_sglang.headers.clear()
    return make_args(
        rollhub_config=str(rollhub_toml),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=port,
        router_policy="consistent_hashing",
    )


@pytest.fixture(scope="module", autouse=True)
def one_hub_per_module():
    yield
    close_process_hub()


def prompt(mode: str, text: str, label: str = "5"):
    from slime.utils.types import Sample

    return Sample(prompt=text, label=label, metadata={"id": mode, "mode": mode})


def flatten_like_slime(samples):
    """slime's check and flattening of a rollout function's output (facts of the record)."""

    def check(node, depth=0):
        if node and not isinstance(node[0], list):
            if depth >= 2 and len(node) > 1:
                ids = {s.rollout_id for s in node}
                assert None not in ids and len(ids) == 1, ids
            return
        for item in node:
            check(item, depth + 1)

    check(samples)
    while isinstance(samples[0], list):
        samples = list(itertools.chain.from_iterable(samples))
    return samples


def test_train_step_tool_and_plain(args, module_sglang, script):
    from slime.rollout.base_types import RolloutFnTrainOutput
    from slime.utils.types import Sample

    source = ListDataSource(
        [prompt("tool", "[tool] What is 2 + 3?"), prompt("plain", "[plain] What is 2 + 3?")], 2
    )
    out = generate_rollout(args, 4, source)

    assert isinstance(out, RolloutFnTrainOutput)
    assert [len(g) for g in out.samples] == [2, 2]  # rollout_batch_size x n_samples_per_prompt
    assert all(isinstance(s, Sample) for g in out.samples for s in g)
    tool, plain = out.samples
    assert [s.group_index for s in tool + plain] == [0, 0, 1, 1]
    assert [s.index for s in tool + plain] == [0, 1, 2, 3]
    assert [s.rollout_id for s in tool + plain] == [0, 1, 2, 3]
    call = script.text('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>')
    answer = script.text("The sum is 5.")
    for s in tool:
        assert s.status is Sample.Status.COMPLETED and s.reward == 1.0 and not s.remove_sample
        response = s.tokens[-s.response_length :]
        assert response[: len(call)] == call and response[-len(answer) :] == answer
        assert s.loss_mask[: len(call)] == [1] * len(call)
        assert s.loss_mask[-len(answer) :] == [1] * len(answer)
        gap = s.loss_mask[len(call) : -len(answer)]
        assert gap and set(gap) == {0}  # the tool result and template tokens are not trained
        assert s.rollout_log_probs[: len(call)] == pytest.approx(
            [scripted_logprob(i, t) for i, t in enumerate(call)]
        )
        assert s.rollout_log_probs[len(call) : -len(answer)] == [0.0] * len(gap)
        assert s.weight_versions == ["3", "3"]  # the router's version on each turn
        assert s.response == "The sum is 5." and s.label == "5"
    for s in plain:
        assert s.loss_mask == [1] * s.response_length
        assert s.tokens[-s.response_length :] == script.text("The answer is 5.")
        assert s.weight_versions == ["3"] and s.metadata["rollhub"]["weight_version"] == 4

    # every prompt the router saw is a prefix of its sample's tokens; turns of one rollout
    # carried one routing key, and it is the rollout's session
    by_key: dict[str, list[list[int]]] = {}
    for body, headers in zip(module_sglang.requests, module_sglang.headers, strict=True):
        by_key.setdefault(headers[ROUTING_HEADER], []).append(body["input_ids"])
    assert len(by_key) == 4 and sorted(len(v) for v in by_key.values()) == [1, 1, 2, 2]
    for s in tool + plain:
        for seen in by_key[s.session_id]:
            assert s.tokens[: len(seen)] == seen
    assert out.metrics["rollhub/episodes"] == 4 and out.metrics["rollhub/failed"] == 0
    assert out.metrics["rollhub/reward_mean"] == 1.0 and out.metrics["rollhub/turns_mean"] == 1.5
    assert all(isinstance(v, int | float) for v in out.metrics.values())
    raw, rewards = post_process_rewards(args, flatten_like_slime(out.samples))
    assert raw == [1.0] * 4 and rewards == [0.0] * 4


def test_train_step_with_fork_failure_truncation_and_abort(args, module_sglang):
    from slime.utils.types import Sample

    module_sglang.abort_marker = "[abort]"
    prompts = [
        prompt("fork", "[fork] What is 2 + 3?"),
        prompt("fail", "[fail] never asked"),
        prompt("long", "[long] Count slowly."),
        prompt("abort", "[abort] What is 2 + 3?"),
    ]
    out = generate_rollout(
        make_args(**{**vars(args), "rollout_batch_size": 4}), 5, ListDataSource(prompts, 2)
    )

    # a fork anywhere makes every group list[list[Sample]]; the failed group is kept as
    # placeholders, so slime gets rollout_batch_size x n rollouts
    assert len(out.samples) == 4
    fork, fail, long, abort = out.samples
    for [s] in fail:
        assert s.remove_sample and s.loss_mask == [0] and s.tokens == [0, 0]
    assert all(isinstance(ep, list) for g in out.samples for ep in g)
    assert [len(ep) for ep in fork] == [2, 2]
    for ep in fork:
        assert len({s.rollout_id for s in ep}) == 1 and ep[0].rollout_id == ep[0].index
        assert [s.metadata["rollhub"]["branch_id"] for s in ep] == [0, 1]
        assert ep[1].metadata["rollhub"]["drift"]["fork"] == 1  # the rewritten history forked
        assert [s.reward for s in ep] == [1.0, 1.0]
        assert ep[1].response == "Final answer: 5" and ep[0].response == ""
    for [s] in long:
        assert s.status is Sample.Status.TRUNCATED and s.response_length == 48
    for [s] in abort:
        assert s.status is Sample.Status.ABORTED and s.response_length == 3
    assert out.metrics["rollhub/failed"] == 2 and out.metrics["rollhub/dropped"] == 2
    assert out.metrics["rollhub/forked"] == 2 and out.metrics["rollhub/samples"] == 10

    flat = flatten_like_slime(out.samples)
    assert len(flat) == 10 and len({s.rollout_id for s in flat}) == 8
    raw, rewards = post_process_rewards(args, flat)
    assert raw == [1.0] * 4 + [0.0] * 6
    assert rewards == [0.0] * 10  # every group agreed with itself: no advantage anywhere
    module_sglang.abort_marker = None


def test_step_where_every_rollout_failed(args):
    source = ListDataSource([prompt("fail", "[fail] x")], 2)
    with pytest.raises(RolloutFailed, match=r"no rollout of step 6 .*RuntimeError: agent failed"):
        generate_rollout(make_args(**{**vars(args), "rollout_batch_size": 1}), 6, source)


def test_over_sampling_and_dynamic_filter_as_slimes_loop(args):
    from tests.plugins.slime import hooks

    right, wrong = "[plain] What is 2 + 3?", "[plain] What is 3 + 3?"
    source = ListDataSource(
        [prompt("plain", right), prompt("plain", wrong, "6"), prompt("plain", wrong, "6")], 2
    )
    over = {**vars(args), "rollout_batch_size": 2, "over_sampling_batch_size": 3}
    step = make_args(
        **{
            **over,
            "dynamic_sampling_filter_path": "tests.plugins.slime.hooks.keep_correct",
            "rollout_sample_filter_path": "tests.plugins.slime.hooks.remove_second",
            "rollout_all_samples_process_path": "tests.plugins.slime.hooks.remember_all",
        }
    )
    hooks.SEEN.clear()
    out = generate_rollout(step, 8, source)

    # groups 1 and 2 are dropped, so a second over-sampling batch (3..5) is fetched; the
    # step ends once groups 0 and 3 are in, sorted by index as slime sorts them
    assert source.offset == 6
    assert [[s.group_index for s in g] for g in out.samples] == [[0, 0], [3, 3]]
    assert [s.reward for g in out.samples for s in g] == [1.0] * 4
    assert [[s.remove_sample for s in g] for g in out.samples] == [[False, True]] * 2
    assert out.metrics["rollout/dynamic_filter/drop_wrong"] >= 2
    assert out.metrics["rollhub/episodes"] == 4  # the chosen groups' episodes
    [seen] = hooks.SEEN
    indices = [g[0].group_index for g in seen]
    assert indices == sorted(indices) and {0, 1, 2, 3} <= set(indices)

    # keep_when_insufficient: a wrong group is kept rather than fetching another batch
    hook = "tests.plugins.slime.hooks.keep_correct_with_fallback"
    fallback = make_args(**{**over, "dynamic_sampling_filter_path": hook})
    source = ListDataSource(
        [prompt("plain", right), prompt("plain", wrong, "6"), prompt("plain", wrong, "6")], 2
    )
    out = generate_rollout(fallback, 9, source)
    assert source.offset == 3 and len(out.samples) == 2
    assert sorted(g[0].reward for g in out.samples) == [0.0, 1.0]


def test_eval_runs_slime_eval_datasets(args, tmp_path):
    from slime.rollout.base_types import RolloutFnEvalOutput

    data = tmp_path / "eval.jsonl"
    rows = [
        {
            "input": "[plain] What is 2 + 3?",
            "label": "5",
            "metadata": {"id": "e1", "mode": "plain"},
        },
        {"input": "[tool] Add 2 and 3.", "label": "6", "metadata": {"id": "e2", "mode": "tool"}},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = SimpleNamespace(
        name="mini",
        path=str(data),
        n_samples_per_eval_prompt=2,
        input_key=None,
        label_key="label",
        metadata_key=None,
    )
    out = generate_rollout(
        make_args(**{**vars(args), "eval_datasets": [cfg]}), 7, None, evaluation=True
    )

    assert isinstance(out, RolloutFnEvalOutput)
    result = out.data["mini"]
    assert list(result) == RECORD["eval_result_keys"]
    assert result["rewards"] == [1.0, 1.0, 0.0, 0.0]  # "6" is not in "The sum is 5."
    assert result["truncated"] == [False] * 4
    assert [s.index for s in result["samples"]] == [0, 1, 2, 3]
    assert [s.label for s in result["samples"]] == ["5", "5", "6", "6"]

    with pytest.raises(ConfigError, match="no eval datasets; pass --eval-prompt-data"):
        generate_rollout(args, 7, None, evaluation=True)


def test_eval_honours_each_datasets_sampling_and_metadata(args, module_sglang, tmp_path):
    from slime.utils.eval_config import EvalDatasetConfig

    data = tmp_path / "eval.jsonl"
    row = {"input": "[plain] What is 2 + 3?", "label": "6", "metadata": {"id": "e1"}}
    data.write_text(json.dumps(row) + "\n")
    greedy = EvalDatasetConfig(
        name="greedy",
        path=str(data),
        label_key="label",
        temperature=0.0,
        max_response_len=32,
        rm_type="math",
        metadata_overrides={"label": "answer"},  # wins over the row's label in the payload
    )
    default = EvalDatasetConfig(name="default", path=str(data), label_key="label")
    eval_args = make_args(**{**vars(args), "eval_datasets": [greedy, default]})
    out = generate_rollout(eval_args, 7, None, evaluation=True)

    # datasets run one after the other: the greedy one's model calls come first
    params = [r["sampling_params"] for r in module_sglang.requests]
    assert [(p["temperature"], p["max_new_tokens"]) for p in params] == [(0.0, 32), (0.7, 48)]
    [g] = out.data["greedy"]["samples"]
    assert {k: g.metadata[k] for k in ("id", "rm_type", "label")} == {
        "id": "e1",
        "rm_type": "math",
        "label": "answer",
    }
    assert out.data["greedy"]["rewards"] == [1.0]  # "answer" is in "The answer is 5."
    assert out.data["default"]["rewards"] == [0.0]  # "6" is not
    assert "rm_type" not in out.data["default"]["samples"][0].metadata


def test_custom_generate_function_from_slimes_own_loop(args, module_sglang):
    from slime.utils.types import Sample

    base = prompt("tool", "[tool] What is 2 + 3?")
    base.group_index, base.index = 40, 80

    close_process_hub()  # the generate function may be the first to need the hub

    async def slime_loop():  # slime awaits the function on its own event loop
        return await asyncio.gather(
            generate(args, base, {"temperature": 1.0, "max_new_tokens": 64}),
            generate(args, prompt("fail", "[fail] x"), {}, evaluation=True),
            generate(  # slime's eval loop hands over the dataset's sampling
                args,
                prompt("plain", "[plain] What is 2 + 3?"),
                {"temperature": 0.0, "max_new_tokens": 16, "stop_token_ids": [7]},
                evaluation=True,
            ),
        )

    ok, failed, evaluated = asyncio.run(slime_loop())
    # training follows rollhub.toml's sampling (0.7, 48), not slime's; eval takes slime's
    params = {
        (r["sampling_params"]["temperature"], r["sampling_params"]["max_new_tokens"])
        for r in module_sglang.requests
    }
    assert params == {(0.7, 48), (0.0, 16)}
    assert [s.status for s in evaluated] == [Sample.Status.COMPLETED]
    [s] = ok
    assert s.status is Sample.Status.COMPLETED and s.reward == 1.0
    assert (s.group_index, s.index, s.rollout_id) == (40, 80, 80)
    assert 0 in s.loss_mask and s.weight_versions == ["3", "3"]
    [f] = failed
    assert f.status is Sample.Status.FAILED and f.remove_sample and f.tokens == [0, 0]


def test_one_hub_per_process(args):
    first = process_hub(args)
    assert process_hub(make_args()) is first  # later calls reuse it, whatever their args


def test_config_from_environment_and_errors(rollhub_toml, tmp_path):
    cfg = config_for_slime(
        make_args(sglang_router_ip="10.0.0.2", sglang_router_port=3000, hf_checkpoint="/ckpt"),
        env={CONFIG_ENV: str(rollhub_toml)},
    )
    options = cfg.token_source.options
    assert options["engine"]["options"]["base_url"] == "http://10.0.0.2:3000"
    assert options["model"] == MODEL  # the file's model wins over --hf-checkpoint
    with pytest.raises(ConfigError, match=f"set {CONFIG_ENV}=/path/to/rollhub.toml"):
        config_for_slime(make_args(), env={})
    export = tmp_path / "export.toml"
    export.write_text('[trainer]\nname = "export"\n')
    with pytest.raises(ConfigError, match=r"trainer.name is 'export'.*name = \"slime\""):
        config_for_slime(make_args(rollhub_config=str(export)), env={})

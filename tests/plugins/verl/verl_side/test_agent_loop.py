"""The rollhub agent loop under verl's real worker code: rows in, AgentLoopOutputs out.

Every episode runs through the real pipeline (local runtime workers serving agents.py over
HTTP, the file store, the in-process gateway rendering with Qwen2.5's chat template) and
samples through verl's real ``LLMServerClient`` and load balancer from scripted replicas.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rollhub.hubs.async_hub import AsyncHub
from rollhub.hubs.hosted import close_hub, hosted_hub
from rollhub_verl.worker_hub import hub_key

from .drive import dataset_rows, make_loop, run_v0, run_v1, sampling_params, tq_worker, v0_chunks
from .fakes import TOOL_CALL, logprob_at
from .verl_rows import RESPONSE_LENGTH, row, rows_parquet

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUESTION = "What is 6 times 7?"


@pytest.fixture(scope="module")
def toml(rollhub_toml) -> Path:
    return rollhub_toml("main")


@pytest.fixture(scope="module")
def v1_config(verl_config, toml):
    return verl_config(toml, use_v1=True, n=2)


@pytest.fixture(scope="module")
def v0_config(verl_config, toml):
    return verl_config(toml, use_v1=False, n=2)


@pytest.fixture(scope="module")
def v0_worker(v0_config, stack):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    return AgentLoopWorker(v0_config, stack.client)


@pytest.fixture(scope="module")
def tokenizer(v0_worker):
    return v0_worker.tokenizer


@pytest.fixture(scope="module")
def rows(v0_config, tokenizer, tmp_path_factory) -> dict[str, dict[str, Any]]:
    data = [
        row(0, QUESTION),
        row(1, "Use the calculator: what is 6 times 7? [tool]", mode="tool"),
        row(2, QUESTION, mode="fork"),
        row(3, QUESTION, mode="fail"),
        row(4, QUESTION, truth="41"),
    ]
    path = rows_parquet(tmp_path_factory.mktemp("data") / "rows.parquet", data)
    out = dataset_rows(v0_config, tokenizer, path)
    return {r["extra_info"]["mode"] + str(r["index"]): r for r in out}


def rendered(tokenizer, messages, **kw) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kw)
    return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


def reply_ids(tokenizer, text: str) -> list[int]:
    return [
        *tokenizer.encode(text, add_special_tokens=False),
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]


async def run_loop(worker, config, r: dict[str, Any], *, uid: str, step: int, session: int = 0):
    loop = make_loop(worker, config)
    kwargs = dict(r, uid=uid, global_steps=step, session_id=session, agent_name="rollhub")
    kwargs.pop("agent_name")  # the worker consumes it before calling run
    return await loop.run(sampling_params(config), **kwargs)


async def test_single_turn_output_field_by_field(
    v0_worker, v1_config, rows, tokenizer, stack, toml
):
    stack.set_step(3)
    before = len(stack.calls())
    outputs = await run_loop(v0_worker, v1_config, rows["single0"], uid="u-single", step=3)
    assert isinstance(outputs, list) and len(outputs) == 1
    out = outputs[0]
    messages = list(rows["single0"]["raw_prompt"])
    answer = reply_ids(tokenizer, "The result is 42.\nAnswer: 42")
    assert out.prompt_ids == rendered(tokenizer, messages)
    assert out.response_ids == answer
    assert out.response_mask == [1] * len(answer)
    assert out.response_logprobs == pytest.approx([logprob_at(i, t) for i, t in enumerate(answer)])
    assert out.reward_score == 1.0
    assert out.num_turns == 2
    assert out.metrics.generate_sequences > 0
    extra = out.extra_fields
    assert extra["rollhub_status"] == "ok" and extra["rollhub_trainable"] is True
    assert extra["rollhub_weight_version"] == 3
    assert extra["min_global_steps"] == extra["max_global_steps"] == 3
    assert extra["rollhub_prompt_overflow"] == 0 and extra["rollhub_response_truncated"] == 0
    assert extra["reward_extra_info"] == {"rollhub_reward": 1.0}
    # the gateway sampled through verl's client: verl's sampling wins over the agent's 0.3
    (call,) = stack.calls()[before:]
    params = call["sampling_params"]
    assert params["temperature"] == 0.9 and params["top_p"] == 0.95
    assert params["logprobs"] is True and params["max_tokens"] <= RESPONSE_LENGTH
    assert call["prompt_ids"] == out.prompt_ids
    # sticky routing: verl's balancer saw the capture session id as request_id
    session = extra["rollhub_episode_id"]
    assert session in stack.balancer._request_id_to_server
    hub = hosted_hub(hub_key(toml))
    assert isinstance(hub, AsyncHub) and hub.weight_version == 3


async def test_multi_turn_tool_episode(v0_worker, v1_config, rows, tokenizer, stack, toml):
    hub = hosted_hub(hub_key(toml))
    assert isinstance(hub, AsyncHub)
    stack.set_step(5)  # the replicas already hold newer weights than the row's step
    (out,) = await run_loop(v0_worker, v1_config, rows["tool1"], uid="u-tool", step=4)
    assert hosted_hub(hub_key(toml)) is hub  # one hub per process, reused by every row
    call_ids = reply_ids(tokenizer, TOOL_CALL)
    final_ids = reply_ids(tokenizer, "6 times 7 is 42.\nAnswer: 42")
    n_call, n_final = len(call_ids), len(final_ids)
    assert out.response_ids[:n_call] == call_ids
    assert out.response_ids[-n_final:] == final_ids
    env = out.response_ids[n_call:-n_final]
    env_text = tokenizer.decode(env)
    assert "<tool_response>\n42\n</tool_response>" in env_text
    assert env_text.rstrip().endswith("<|im_start|>assistant")
    assert out.response_mask == [1] * n_call + [0] * len(env) + [1] * n_final
    lps = out.response_logprobs
    assert lps[:n_call] == pytest.approx([logprob_at(i, t) for i, t in enumerate(call_ids)])
    assert lps[n_call : n_call + len(env)] == [0.0] * len(env)
    assert lps[-n_final:] == pytest.approx([logprob_at(i, t) for i, t in enumerate(final_ids)])
    assert out.num_turns == 4
    assert out.reward_score == 1.0
    # each turn carries the step of the weights that sampled it (the replica's), the
    # episode the step it was admitted at
    assert out.extra_fields["min_global_steps"] == out.extra_fields["max_global_steps"] == 5
    assert out.extra_fields["rollhub_weight_version"] == 4
    assert out.extra_fields["rollhub_drift"].get("append", 0) >= 1


async def test_fork_is_a_list_in_v1_and_the_last_record_in_v0(
    v0_worker, v1_config, v0_config, rows, tokenizer, stack
):
    r = rows["fork2"]
    outputs = await run_loop(v0_worker, v1_config, r, uid="u-fork", step=3)
    assert len(outputs) == 2
    first, second = outputs
    messages = list(r["raw_prompt"])
    assert first.prompt_ids == rendered(tokenizer, messages)
    assert first.response_ids == reply_ids(tokenizer, "The result is 42.\nAnswer: 42")
    assert tokenizer.decode(second.prompt_ids).startswith("<|im_start|>system\nBe brief.")
    assert second.response_mask == [1] * len(second.response_ids)
    assert [o.extra_fields["rollhub_record"] for o in outputs] == [0, 1]
    assert all(o.extra_fields["rollhub_records"] == 2 for o in outputs)
    assert all(o.reward_score == 1.0 for o in outputs)
    assert sum(second.extra_fields["rollhub_drift"].values()) >= 2
    # v0: one output per row, the last record; the other one is counted
    only = await run_loop(v0_worker, v0_config, r, uid="u-fork0", step=3)
    assert not isinstance(only, list)
    assert only.prompt_ids == second.prompt_ids
    assert only.response_ids == second.response_ids
    assert only.extra_fields["rollhub_dropped_records"] == 1


async def test_failed_episode(
    v0_worker, v1_config, v0_config, rows, tokenizer, rollhub_toml, verl_config
):
    r = rows["fail3"]
    assert await run_loop(v0_worker, v1_config, r, uid="u-fail", step=3) == []
    out = await run_loop(v0_worker, v0_config, r, uid="u-fail0", step=3)
    assert out.response_mask == [0] and out.response_logprobs == [0.0]
    assert out.response_ids == [tokenizer.eos_token_id]
    assert out.prompt_ids == rendered(tokenizer, list(r["raw_prompt"]))
    assert out.reward_score == 0.0 and out.num_turns == 0
    extra = out.extra_fields
    assert extra["rollhub_status"] == "agent_error" and extra["rollhub_trainable"] is False
    assert "failed on purpose" in extra["rollhub_error"]
    # the zero_reward policy keeps a failed episode in its group, without a gradient
    zero = verl_config(rollhub_toml("zero", on_failure="zero_reward"), use_v1=True)
    (kept,) = await run_loop(v0_worker, zero, r, uid="u-zero", step=3)
    assert kept.reward_score == 0.0 and kept.response_mask == [0]
    assert kept.extra_fields["rollhub_status"] == "agent_error"


async def test_prompt_budget_moves_the_tail_never_the_system_prompt(
    v0_worker, rows, tokenizer, rollhub_toml, verl_config
):
    config = verl_config(rollhub_toml("short-prompt"), prompt_length=24, response_length=64)
    r = rows["single0"]
    (out,) = await run_loop(v0_worker, config, r, uid="u-p", step=3)
    full = rendered(tokenizer, list(r["raw_prompt"]))
    answer = reply_ids(tokenizer, "The result is 42.\nAnswer: 42")
    assert len(full) > 24
    assert out.prompt_ids == full[:24]
    assert tokenizer.decode(out.prompt_ids).startswith("<|im_start|>system\nYou are a careful")
    overflow = len(full) - 24
    assert out.response_ids == full[24:] + answer
    assert out.response_mask == [0] * overflow + [1] * len(answer)
    assert out.response_logprobs[:overflow] == [0.0] * overflow
    assert out.extra_fields["rollhub_prompt_overflow"] == overflow
    assert out.extra_fields["rollhub_response_truncated"] == 0


async def test_response_budget_cuts_the_end_and_counts_it(
    v0_worker, rows, tokenizer, rollhub_toml, verl_config
):
    config = verl_config(rollhub_toml("short-response"), response_length=40)
    (out,) = await run_loop(v0_worker, config, rows["tool1"], uid="u-r", step=3)
    call_ids = reply_ids(tokenizer, TOOL_CALL)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == 40
    assert out.response_ids[: len(call_ids)] == call_ids
    assert out.extra_fields["rollhub_response_truncated"] > 0
    total = 40 + out.extra_fields["rollhub_response_truncated"]
    final = reply_ids(tokenizer, "6 times 7 is 42.\nAnswer: 42")
    assert total > len(call_ids) + len(final)  # the cut fell in the final answer
    assert out.reward_score == 1.0


async def test_v1_collation_through_transfer_queue(monkeypatch, v1_config, rows, stack, tokenizer):
    worker, captured = tq_worker(monkeypatch, v1_config, stack.client)
    stack.set_step(5)
    await run_v1(worker, rows["single0"], uid="g1", step=5)
    await run_v1(worker, rows["fork2"], uid="g2", step=5)
    await run_v1(worker, rows["fail3"], uid="g3", step=5)
    await run_v1(worker, rows["single4"], uid="g4", step=5)
    assert {s["key"]: s["status"] for s in captured.status if s["status"] != "running"} == {
        "g1": "finished", "g2": "finished", "g3": "finished", "g4": "finished"
    }  # fmt: skip
    # n = 2 sessions per prompt; the fork yields two outputs per session; failures none
    assert sorted(captured.keys) == sorted(
        ["g1_0_0", "g1_1_0", "g2_0_0", "g2_0_1", "g2_1_0", "g2_1_1", "g4_0_0", "g4_1_0"]
    )
    fields = {}
    for batch in captured.fields:
        for i in range(len(batch)):
            item = batch[i]
            fields[len(fields)] = item
    by_key = dict(zip(captured.keys, fields.values(), strict=True))
    g1 = by_key["g1_0_0"]
    answer = reply_ids(tokenizer, "The result is 42.\nAnswer: 42")
    assert g1["responses"].tolist() == answer
    assert g1["prompts"].tolist() == rendered(tokenizer, list(rows["single0"]["raw_prompt"]))
    assert g1["response_mask"].tolist() == [1] * len(answer)
    assert g1["loss_mask"].tolist() == [1] * len(answer)
    assert g1["rollout_log_probs"].tolist() == pytest.approx(
        [logprob_at(i, t) for i, t in enumerate(answer)], abs=1e-6
    )
    assert g1["rm_scores"].tolist() == [0.0] * (len(answer) - 1) + [1.0]
    assert g1["input_ids"].tolist() == g1["prompts"].tolist() + answer
    assert by_key["g4_0_0"]["rm_scores"].tolist()[-1] == 0.0  # wrong ground truth
    assert by_key["g2_0_0"]["rm_scores"].tolist()[-1] == 1.0  # reward on every fork output
    tags = dict(zip(captured.keys, captured.tags, strict=True))
    assert tags["g1_0_0"]["min_global_steps"] == tags["g1_0_0"]["max_global_steps"] == 5
    assert tags["g1_0_0"]["global_steps"] == 5


async def test_v0_collation_into_dataproto(v0_worker, rows, tokenizer, stack):
    from .verl_rows import PROMPT_LENGTH

    stack.set_step(6)
    before = len(stack.calls())
    picked = [rows["single0"], rows["tool1"], rows["fail3"]]
    out = await run_v0(v0_worker, picked, n=2, step=6)
    # each row's scheduling priority reached the replica (vLLM's request priority)
    assert {c["priority"] for c in stack.calls()[before:]} == set(range(6))
    b = out.batch
    assert b["prompts"].shape == (6, PROMPT_LENGTH)
    assert b["responses"].shape == (6, RESPONSE_LENGTH)
    assert b["input_ids"].shape == b["attention_mask"].shape == (6, PROMPT_LENGTH + RESPONSE_LENGTH)
    assert b["rollout_log_probs"].shape == (6, RESPONSE_LENGTH)
    status = list(out.non_tensor_batch["rollhub_status"])
    assert status == ["ok", "ok", "ok", "ok", "agent_error", "agent_error"]
    full = rendered(tokenizer, list(rows["single0"]["raw_prompt"]))
    answer = reply_ids(tokenizer, "The result is 42.\nAnswer: 42")
    assert b["prompts"][0, -len(full) :].tolist() == full  # left-padded
    assert b["attention_mask"][0, : PROMPT_LENGTH - len(full)].sum() == 0
    assert b["responses"][0, : len(answer)].tolist() == answer
    assert b["response_mask"][0].sum() == len(answer)
    assert b["rm_scores"][0, len(answer) - 1] == 1.0 and b["rm_scores"][0].sum() == 1.0
    # failed rows: one masked token, reward 0.0, no gradient anywhere
    assert b["response_mask"][4:].sum() == 0
    assert b["rm_scores"][4:].abs().sum() == 0
    assert list(out.non_tensor_batch["__num_turns__"]) == [2, 2, 4, 4, 0, 0]
    assert list(out.non_tensor_batch["max_global_steps"][:4]) == [6, 6, 6, 6]


async def test_v0_copies_split_between_workers_draw_their_own_seeds(
    rows, stack, rollhub_toml, verl_config
):
    """Under v0 a row carries no copy index. verl numbers the batch (``priority``), then
    cuts it among its agent-loop workers, each a process with its own hub: two workers
    that split a prompt's copies must not give them the same sampling seeds."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    toml = rollhub_toml("split")
    worker = AgentLoopWorker(verl_config(toml, use_v1=False, n=4), stack.client)
    stack.set_step(7)
    before = len(stack.calls())
    outs = []
    for chunk in v0_chunks([rows["single0"]], n=4, step=7, workers=2):
        outs.append(await worker.generate_sequences(chunk))
        # the next chunk's worker is another process: a hub that has seen none of these
        await asyncio.to_thread(close_hub, hub_key(toml))
    out = DataProto.concat(outs)
    assert list(out.non_tensor_batch["rollhub_status"]) == ["ok"] * 4
    seeds = [c["sampling_params"]["seed"] for c in stack.calls()[before:]]
    assert len(seeds) == 4 and len(set(seeds)) == 4, seeds
    # each copy is its own sample of the prompt: episode ids are "{uid}-{index}-{suffix}"
    ids = [str(e).rsplit("-", 1)[0] for e in out.non_tensor_batch["rollhub_episode_id"]]
    assert len(set(ids)) == 4, ids

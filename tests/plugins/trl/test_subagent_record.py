"""Which record TRL trains when a session has a sub-agent.

The gateway lists records in branch-creation order, not the order turns finished: a main
agent that calls the model, hands work to a sub-agent (a fresh conversation, so a new
branch) and then writes its final answer has that answer in the *first* record. The
records here come from the gateway's own conversation code and Qwen2.5 chat template.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rollhub.episode import Episode
from rollhub.sampling import Generation
from rollhub.trace import TraceRecord
from rollhub_gateway.conformance import model_for
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.turns import ChatTurn
from rollhub_trl.grpo_trainer import _SamplerCheck
from rollhub_trl.rollout import episode_sample, final_record


@pytest.fixture(scope="module")
def session() -> tuple[Any, list[TraceRecord], int]:
    model = model_for("qwen2_5")
    renderer = model.renderer
    stop = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("sess")

    def turn(messages: list[dict[str, str]], text: str) -> str:
        prep = conv.prepare(ChatTurn(list(messages)))
        ids = [*renderer.encode(text), stop]
        gen = Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")
        parsed = model.parse(ids, prep)
        conv.commit(prep, gen, parsed, weight_version=0)
        return str(parsed.content)

    main = [{"role": "system", "content": "main"}, {"role": "user", "content": "solve it"}]
    first = turn(main, "let me delegate")  # turn 0: main agent
    main += [{"role": "assistant", "content": first},
             {"role": "user", "content": "sub-agent said: 42"}]  # fmt: skip
    turn([{"role": "system", "content": "sub-agent"}, {"role": "user", "content": "compute"}],
         "42")  # turn 1: the sub-agent, a new branch  # fmt: skip
    turn(main, "FINAL ANSWER 42")  # turn 2: the main agent's final answer
    return renderer.tokenizer, conv.traces(), stop


def _trained_text(tokenizer: Any, ids: list[int], mask: list[int]) -> str:
    return str(tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m]))


def test_trl_trains_the_record_with_the_last_model_call(session) -> None:
    tokenizer, records, stop = session
    assert len(records) == 2  # the main agent's branch was created first
    ep = Episode("e", "g", "sess", 0, "ok", reward=1.0, traces=records, trainable=True)
    s = episode_sample(ep, filler_id=stop, advantage=1.0)
    text = _trained_text(tokenizer, s.completion_ids, s.env_mask)
    assert "FINAL ANSWER 42" in text and "let me delegate" in text
    assert s.records_dropped == 1
    assert final_record(records) is records[0]


def test_the_sampler_check_reads_the_trained_record(session) -> None:
    _, records, _ = session
    ep = Episode("e", "g", "sess", 0, "ok", reward=1.0, traces=records, trainable=True)
    trained = records[0]
    metrics: dict[str, Any] = {}
    check = _SamplerCheck([ep], metrics)
    check.add([0], torch.tensor([trained.response_logprobs]))
    assert metrics["sampler_learner_abs_diff"] == pytest.approx(0.0, abs=1e-6)


def test_records_without_tokens_are_never_chosen(session) -> None:
    _, records, _ = session
    empty = records[1].model_copy(update={"response_ids": [], "response_mask": [],
                                          "response_logprobs": [], "branch_id": 2})  # fmt: skip
    assert final_record([records[0], empty]) is records[0]
    assert final_record([empty]) is None

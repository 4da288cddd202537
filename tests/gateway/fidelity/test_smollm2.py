"""SmolLM2's own ChatML template: token-in/token-out continuity without tools."""

from __future__ import annotations

import pytest
from rollhub.errors import GatewayError
from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.turns import ChatTurn


def _gen(ids: list[int]) -> Generation:
    return Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")


def test_append_only_session_reuses_exact_ids(smollm2_tokenizer):
    model = build_chat_model(tokenizer=smollm2_tokenizer)
    assert model.family == "chatml" and not model.supports_tools()
    tok = smollm2_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("s")
    msgs = [{"role": "user", "content": "Hi"}]
    sampled: list[list[int]] = []
    prev_full: list[int] = []
    for k in range(5):
        prep = conv.prepare(ChatTurn(list(msgs)))
        assert prep.drift == "append"
        assert prep.prompt_ids[: len(prev_full)] == prev_full
        # with a ChatML template the tail rendering equals a full re-tokenisation
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        assert prep.prompt_ids == tok.encode(text, add_special_tokens=False)
        out = [*tok.encode(f" answer {k} ", add_special_tokens=False), end]
        sampled.append(out)
        parsed = model.parse(out)
        conv.commit(prep, _gen(out), parsed, weight_version=k)
        prev_full = prep.prompt_ids + out
        msgs += [
            {"role": "assistant", "content": parsed.content},
            {"role": "user", "content": f"q{k}"},
        ]
    (rec,) = conv.traces()
    assert [t.weight_version for t in rec.turns] == list(range(5))
    for span, out in zip(rec.turns, sampled, strict=False):
        assert rec.response_ids[span.start : span.end] == out
        assert rec.response_mask[span.start : span.end] == [1] * len(out)
        assert rec.response_logprobs[span.start : span.end] == _gen(out).logprobs
    assert rec.num_sampled == sum(map(len, sampled))
    assert conv.drift_counts()["append"] == 5


def test_tools_rejected_before_sampling_naming_the_override(smollm2_tokenizer):
    model = build_chat_model(tokenizer=smollm2_tokenizer)
    conv = model.new_conversation("s")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(GatewayError, match='family = "hermes"'):
        conv.prepare(ChatTurn([{"role": "user", "content": "x"}], tools=tools))
    assert conv.traces() == []


def test_edited_history_forks_without_training_twice(smollm2_tokenizer):
    model = build_chat_model(tokenizer=smollm2_tokenizer)
    tok = smollm2_tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("s")
    first = [{"role": "user", "content": "Hi"}]
    p0 = conv.prepare(ChatTurn(first))
    out0 = [*tok.encode("Hello", add_special_tokens=False), end]
    conv.commit(p0, _gen(out0), model.parse(out0))
    # the agent rewrites the first user message: nothing to continue
    p1 = conv.prepare(ChatTurn([{"role": "user", "content": "Hey"}]))
    assert p1.drift == "fork"
    out1 = [*tok.encode("Yo", add_special_tokens=False), end]
    conv.commit(p1, _gen(out1), model.parse(out1))
    recs = conv.traces()
    assert len(recs) == 2
    assert recs[1].parent_branch_id is None and recs[1].num_sampled == len(out1)
    assert sum(r.num_sampled for r in recs) == len(out0) + len(out1)


def test_global_drift_counts_follow_commits(smollm2_tokenizer):
    from rollhub_gateway.trajectory import global_drift_counts

    model = build_chat_model(tokenizer=smollm2_tokenizer)
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    before = global_drift_counts()
    conv = model.new_conversation("g")
    for text in ("Hi", "Hey"):  # the second edits the first message: a fork
        prep = conv.prepare(ChatTurn([{"role": "user", "content": text}]))
        out = [*smollm2_tokenizer.encode("ok", add_special_tokens=False), end]
        conv.commit(prep, _gen(out), model.parse(out))
    after = global_drift_counts()
    assert after["append"] - before["append"] == 1
    assert after["fork"] - before["fork"] == 1
    assert conv.traces()[0].metadata["drift"]["fork"] == 1

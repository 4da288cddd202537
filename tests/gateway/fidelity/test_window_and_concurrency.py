"""Window renders are checked against whole renders; concurrent calls on one tip fork."""

from __future__ import annotations

from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.families.locality import probe_locality
from rollhub_gateway.trajectory import global_drift_counts
from rollhub_gateway.turns import ChatTurn

# ChatML that numbers every message by its position in the whole conversation: it only
# ever appends, but a window render numbers the new messages differently
NONLOCAL = (
    "{% for m in messages %}<|im_start|>{{ m.role }} {{ loop.index0 }}\n{{ m.content }}"
    "<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant {{ messages|length }}\n{% endif %}"
)


def _gen(ids):
    return Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")


def test_probe_refuses_a_nonlocal_template(smollm2_tokenizer):
    model = build_chat_model(tokenizer=smollm2_tokenizer, chat_template=NONLOCAL, family="chatml")
    assert probe_locality(model.renderer) is False
    assert model.renderer.windowed is False


def test_a_window_that_disagrees_is_caught_and_turned_off(smollm2_tokenizer):
    model = build_chat_model(tokenizer=smollm2_tokenizer, chat_template=NONLOCAL, family="chatml")
    r = model.renderer
    r.windowed = True  # as if the probe had missed it
    model.verify_every = 3
    end = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")
    before = global_drift_counts()["window_mismatch"]
    conv = model.new_conversation("w")
    msgs = [{"role": "user", "content": "q0"}]
    for k in range(6):
        prep = conv.prepare(ChatTurn(list(msgs)))
        out = [*smollm2_tokenizer.encode(f"a{k}", add_special_tokens=False), end]
        conv.commit(prep, _gen(out), model.parse(out))
        msgs += [
            {"role": "assistant", "content": f"a{k}"},
            {"role": "user", "content": f"q{k + 1}"},
        ]
    assert r.windowed is False
    assert global_drift_counts()["window_mismatch"] == before + 1
    assert conv.drift_counts()["append"] == 6
    # after the switch-off every prompt is the template's own rendering again
    whole = r.encode(r.render_text(r.template_messages(msgs[:-2]), None, generation=True))
    assert prep.prompt_ids == whole


def test_concurrent_calls_on_one_tip_fork_instead_of_interleaving(family_model):
    model = family_model("qwen2_5")
    r = model.renderer
    end = r.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("c")
    msgs = [{"role": "user", "content": "two ideas please"}]
    p0 = conv.prepare(ChatTurn(list(msgs)))
    conv.commit(p0, _gen([*r.encode("Sure."), end]), model.parse([*r.encode("Sure."), end]))
    msgs += [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "go"}]
    a = conv.prepare(ChatTurn(list(msgs)))
    b = conv.prepare(ChatTurn(list(msgs)))  # prepared before a commits: same tip
    assert a.prompt_ids == b.prompt_ids and a.drift == b.drift == "append"
    out_a, out_b = [*r.encode("Idea A."), end], [*r.encode("Idea B."), end]
    conv.commit(a, _gen(out_a), model.parse(out_a))
    conv.commit(b, _gen(out_b), model.parse(out_b))
    first, second = conv.traces()
    assert second.parent_branch_id == first.branch_id and second.fork_turn == p0.turn_index
    assert second.turns[0].drift == "fork" and second.prompt_ids == b.prompt_ids
    assert second.response_ids == out_b
    assert (
        first.num_sampled + second.num_sampled
        == len(out_a) + len(out_b) + len(r.encode("Sure.")) + 1
    )


def test_concurrent_first_turns_are_an_append_and_a_fork(family_model):
    """Two first turns prepared before either commits: the second to commit starts a second
    record, so it is a fork (drift is decided when a turn is committed)."""
    model = family_model("qwen2_5")
    r = model.renderer
    end = r.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("c")
    msgs = [{"role": "user", "content": "two ideas please"}]
    a = conv.prepare(ChatTurn(list(msgs)))
    b = conv.prepare(ChatTurn(list(msgs)))
    out_a, out_b = [*r.encode("Idea A."), end], [*r.encode("Idea B."), end]
    conv.commit(b, _gen(out_b), model.parse(out_b))
    conv.commit(a, _gen(out_a), model.parse(out_a))
    first, second = conv.traces()
    assert [t.drift for t in first.turns] == ["append"]
    assert [t.drift for t in second.turns] == ["fork"]
    assert first.response_ids == out_b and second.response_ids == out_a
    assert conv.drift_counts()["append"] == 1 and conv.drift_counts()["fork"] == 1

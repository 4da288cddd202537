"""Property tests of the trajectory manager: random turn sequences with random rewrites,
replays, sub-agents and truncated outputs never lose a sampled token, never train one
twice, keep mask/logprob lengths aligned, and keep each turn's exact context."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollhub.sampling import Generation
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.turns import ChatTurn

OPS = st.lists(
    st.tuples(
        st.sampled_from(["next", "next", "next", "edit", "replay", "fresh", "new_user"]),
        st.integers(0, 50),  # which earlier state / message
        st.booleans(),  # tool call or answer
        st.booleans(),  # truncated (no stop id)
    ),
    min_size=1,
    max_size=12,
)
WORDS = ["alpha", "beta", "gamma", "delta", "rain", "sun", "42", "ok", "é", "🙂"]


def _run(model, ops, session: str):
    r = model.renderer
    fam = r.family
    stop = r.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation(session)
    cur = [{"role": "system", "content": "sys"}, {"role": "user", "content": "start"}]
    sent: list[list[dict]] = []
    turns = {}
    for n, (kind, pick, call, truncated) in enumerate(ops):
        if kind == "edit":
            users = [i for i, m in enumerate(cur) if m["role"] == "user"]
            i = users[pick % len(users)]
            cur = [*cur[:i], {"role": "user", "content": f"edited {n}"}]
        elif kind == "replay" and sent:
            cur = list(sent[pick % len(sent)])
        elif kind == "fresh":
            cur = [
                {"role": "system", "content": "sub-agent"},
                {"role": "user", "content": f"task {n}"},
            ]
        prep = conv.prepare(ChatTurn(list(cur), tools=TOOLS))
        words = " ".join(WORDS[(pick + k) % len(WORDS)] for k in range(1 + pick % 5))
        text = fam.format_output(
            "" if call else words,
            reasoning=f"r{n}",
            tool_calls=[("get_weather", {"city": words})] if call else [],
        )
        ids = r.encode(text)
        if truncated:
            ids = ids[: max(1, len(ids) // 2)]
        else:
            ids.append(stop)
        gen = Generation(
            ids,
            [scripted_logprob(i, t) for i, t in enumerate(ids)],
            "length" if truncated else "stop",
        )
        parsed = model.parse(ids, prep)
        conv.commit(prep, gen, parsed, weight_version=n)
        turns[prep.turn_index] = (prep.prompt_ids, ids, gen.logprobs)
        sent.append(list(cur))
        echo = {"role": "assistant", "content": parsed.content or None}
        if parsed.tool_calls:
            echo["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in parsed.tool_calls
            ]
        cur = [*cur, echo]
        if parsed.tool_calls and kind != "new_user":
            cur += [
                {"role": "tool", "tool_call_id": c.id, "content": f"t{n}"}
                for c in parsed.tool_calls
            ]
        else:
            cur.append({"role": "user", "content": f"u{n}"})
    return conv, turns


def _check(conv, turns):
    records = conv.traces()
    seen: dict[int, int] = {}
    for rec in records:
        assert len(rec.response_ids) == len(rec.response_mask) == len(rec.response_logprobs)
        for pos, m in enumerate(rec.response_mask):
            if not m:
                assert rec.response_logprobs[pos] == 0.0
        covered = 0
        for span in rec.turns:
            seen[span.turn_index] = seen.get(span.turn_index, 0) + 1
            prompt, ids, lps = turns[span.turn_index]
            assert rec.response_ids[span.start : span.end] == ids
            assert rec.response_mask[span.start : span.end] == [1] * len(ids)
            assert rec.response_logprobs[span.start : span.end] == lps
            # the record shows exactly the context the model was given
            assert rec.full_ids[: len(rec.prompt_ids) + span.start] == prompt
            covered += len(ids)
        assert covered == rec.num_sampled  # every mask-1 token belongs to a turn span
    assert seen == {t: 1 for t in turns}  # each turn trained once, none lost
    assert sum(r.num_sampled for r in records) == sum(len(ids) for _, ids, _ in turns.values())
    counts = conv.drift_counts()
    assert counts["append"] + counts["rerender"] + counts["fork"] == len(turns)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_sessions_on_an_append_only_template(ops, family_model):
    conv, turns = _run(family_model("qwen2_5"), ops, "prop-a")
    _check(conv, turns)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_sessions_on_a_rewriting_template(ops, family_model):
    conv, turns = _run(family_model("qwen3"), ops, "prop-b")
    _check(conv, turns)


def test_a_fixed_session_exercises_every_drift_kind(family_model):
    ops = [
        ("next", 1, True, False),
        ("next", 2, False, False),
        ("next", 3, True, False),
        ("edit", 0, False, False),
        ("replay", 1, False, True),
        ("fresh", 0, True, False),
        ("next", 4, False, False),
    ]
    conv, turns = _run(family_model("qwen3"), ops, "fixed")
    _check(conv, turns)
    counts = conv.drift_counts()
    assert counts["append"] >= 3 and counts["fork"] >= 2 and counts["rerender"] >= 1
    assert counts["masked_tokens"] > 0
    records = conv.traces()
    assert len(records) >= 4
    assert all(r.metadata["drift"] == counts for r in records)

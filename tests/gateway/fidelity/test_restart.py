"""Durable sessions: a process holding a session is killed mid-session; a new process on
the same journal resumes the session, finishes it and returns every turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.conformance import TOOLS
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.journal import SessionJournal
from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer
from rollhub_gateway.turns import ChatTurn

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from rollhub.sampling import Generation
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.conformance import TOOLS
    from rollhub_gateway.engines.scripted import scripted_logprob
    from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer
    from rollhub_gateway.turns import ChatTurn

    model = build_chat_model("qwen2_5", tokenizer=vocab_tokenizer("qwen2_5"),
                             chat_template=family_template("qwen2_5"), journal=sys.argv[1])
    r = model.renderer
    end = r.tokenizer.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("sess-1")
    msgs = [{"role": "user", "content": "weather in three cities"}]
    sampled = []
    for k, city in enumerate(["Oslo", "Rome", "Lima"]):
        prep = conv.prepare(ChatTurn(list(msgs), tools=TOOLS))
        ids = r.encode(r.family.format_output("", tool_calls=[("get_weather", {"city": city})]))
        ids.append(end)
        gen = Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")
        parsed = model.parse(ids, prep)
        conv.commit(prep, gen, parsed, weight_version=7)
        sampled.append(ids)
        c = parsed.tool_calls[0]
        msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": c.id,
                  "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]},
                 {"role": "tool", "tool_call_id": c.id, "content": city + ": 20C"}]
    print(json.dumps({"messages": msgs, "sampled": sampled}), flush=True)
    time.sleep(600)  # mid-session: the parent kills this process
    """
)


def test_killed_process_session_resumes_from_the_journal(tmp_path):
    journal = tmp_path / "sessions.sqlite"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(journal)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        line = child.stdout.readline()
        assert line, "child process exited before committing its turns"
        state = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    model = build_chat_model(
        "qwen2_5",
        tokenizer=vocab_tokenizer("qwen2_5"),
        chat_template=family_template("qwen2_5"),
        journal=journal,
    )
    assert model.open_sessions() == ["sess-1"]
    conv = model.new_conversation("sess-1")
    assert [len(r.turns) for r in conv.traces()] == [3]

    r = model.renderer
    prep = conv.prepare(ChatTurn(state["messages"], tools=TOOLS))
    assert prep.drift == "append" and prep.turn_index == 3
    (before,) = conv.traces()
    assert prep.prompt_ids[: len(before.full_ids)] == before.full_ids
    ids = [
        *r.encode("Oslo 20C, Rome 20C, Lima 20C."),
        r.tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    gen = Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")
    conv.commit(prep, gen, model.parse(ids, prep), weight_version=8)
    (rec,) = conv.finish()

    assert [t.turn_index for t in rec.turns] == [0, 1, 2, 3]
    assert [t.weight_version for t in rec.turns] == [7, 7, 7, 8]
    for span, want in zip(rec.turns, [*state["sampled"], ids], strict=False):
        assert rec.response_ids[span.start : span.end] == want
        assert rec.response_logprobs[span.start : span.end] == [
            scripted_logprob(i, t) for i, t in enumerate(want)
        ]
    assert rec.num_sampled == sum(map(len, state["sampled"])) + len(ids)
    assert model.open_sessions() == []
    assert SessionJournal(journal).state("sess-1") == "done"


def test_journal_discard_and_wal_mode(tmp_path):
    j = SessionJournal(tmp_path / "j.sqlite")
    j.open_session("a", "m")
    j.append("a", 0, {"x": 1})
    assert j.turns("a") == [{"x": 1}] and j.open_sessions() == ["a"]
    assert j._run("PRAGMA journal_mode")[0][0] == "wal"
    j.discard("a")
    assert j.turns("a") == [] and j.state("a") is None
    t0 = time.perf_counter()
    for k in range(200):
        j.append("b", k, {"ids": list(range(300))})
    assert len(j.turns("b")) == 200
    assert time.perf_counter() - t0 < 30  # sanity only; the benchmark measures cost

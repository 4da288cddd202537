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
from rollhub_gateway.conformance.script import TOOLS
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.journal import ENTRY_FIELDS, SessionJournal
from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer
from rollhub_gateway.turns import ChatTurn

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from rollhub.sampling import Generation
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.conformance.script import TOOLS
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


def _entry(turn: int, **fields) -> dict:
    """A journal entry with every field (values do not matter to the journal itself)."""
    return {**dict.fromkeys(ENTRY_FIELDS), "turn": turn, **fields}


def test_journal_discard_and_wal_mode(tmp_path):
    j = SessionJournal(tmp_path / "j.sqlite")
    j.open_session("a", "m")
    j.append("a", 0, _entry(0, x=1))
    assert j.turns("a") == [_entry(0, x=1)] and j.open_sessions() == ["a"]
    assert j._run("PRAGMA journal_mode")[0][0] == "wal"
    j.discard("a")
    assert j.turns("a") == [] and j.state("a") is None
    t0 = time.perf_counter()
    for k in range(200):
        j.append("b", k, _entry(k, output_ids=list(range(300))))
    assert len(j.turns("b")) == 200
    assert time.perf_counter() - t0 < 30  # sanity only; the benchmark measures cost


GATEWAY_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.config import GatewayConfig
    from rollhub_gateway.engines.scripted import ScriptedBackend
    from rollhub_gateway.gateway import Gateway
    from rollhub_gateway.http.serving import ThreadedGateway
    from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer

    model = build_chat_model("qwen2_5", tokenizer=vocab_tokenizer("qwen2_5"),
                             chat_template=family_template("qwen2_5"), journal=sys.argv[1])
    r = model.renderer
    end = r.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def answer(prompt_ids):
        done = r.tokenizer.decode(prompt_ids).count("<tool_response>")
        if done < 4:
            text = r.family.format_output("", tool_calls=[("get_weather", {"city": f"c{done}"})])
        else:
            text = "All four cities are warm."
        return r.encode(text) + [end]

    port = int(sys.argv[2]) if len(sys.argv) > 2 else None
    gw = ThreadedGateway(Gateway(ScriptedBackend(script=[answer] * 10), model,
                                 GatewayConfig(admin_token="adm", log_turns=False)), port=port)
    gw.start()
    print(json.dumps({"url": gw.url}), flush=True)
    time.sleep(600)
    """
)


def _admin(url: str, path: str, body: dict | None = None) -> dict:
    import urllib.request

    req = urllib.request.Request(
        url + path,
        data=json.dumps(body or {}).encode(),
        headers={"Authorization": "Bearer adm", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _start_gateway(journal, port: int | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", GATEWAY_CHILD, str(journal), *([str(port)] if port else [])],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError("gateway process exited before serving")
    return proc, json.loads(line)["url"]


def _agent_turn(url: str, key: str, messages: list[dict]) -> None:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    msg = (
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
    )
    echo = {"role": "assistant", "content": msg.content}
    if msg.tool_calls:
        echo["tool_calls"] = [c.model_dump(exclude_none=True) for c in msg.tool_calls]
    messages.append(echo)
    for c in msg.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": c.id, "content": "warm"})


def test_killed_gateway_process_resumes_sessions_over_http(tmp_path):
    journal = tmp_path / "gateway.sqlite"
    messages = [{"role": "user", "content": "weather in four cities"}]
    proc, url = _start_gateway(journal)
    try:
        key = _admin(url, "/sessions", {"session_id": "keep"})["api_key"]
        for _ in range(2):
            _agent_turn(url, key, messages)
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-session: no finish, no clean shutdown
        proc.wait(timeout=30)

    proc, url = _start_gateway(journal)
    try:
        key = _admin(url, "/sessions", {"session_id": "keep"})["api_key"]
        for _ in range(3):
            _agent_turn(url, key, messages)
        traces = _admin(url, "/sessions/keep/finish")["traces"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert messages[-1]["content"] == "All four cities are warm."
    (rec,) = traces
    assert [t["turn_index"] for t in rec["turns"]] == [0, 1, 2, 3, 4]
    assert [t["drift"] for t in rec["turns"]] == ["append"] * 5
    for t in rec["turns"]:
        ids = rec["response_ids"][t["start"] : t["end"]]
        assert rec["response_mask"][t["start"] : t["end"]] == [1] * len(ids)
        assert rec["response_logprobs"][t["start"] : t["end"]] == [
            scripted_logprob(i, x) for i, x in enumerate(ids)
        ]
    assert SessionJournal(journal).state("keep") == "done"


def test_a_finished_session_id_starts_afresh(tmp_path):
    model = build_chat_model(
        "qwen2_5",
        tokenizer=vocab_tokenizer("qwen2_5"),
        chat_template=family_template("qwen2_5"),
        journal=tmp_path / "j",
    )
    r = model.renderer
    ids = [*r.encode("hi"), r.stop_ids[0]]
    conv = model.new_conversation("s")
    prep = conv.prepare(ChatTurn([{"role": "user", "content": "x"}]))
    conv.commit(prep, Generation(ids, [0.0] * len(ids), "stop"), model.parse(ids, prep))
    conv.finish()
    again = model.new_conversation("s")
    assert again.traces() == [] and model.open_sessions() == ["s"]


def test_agents_carry_on_with_their_keys_after_a_gateway_kill(tmp_path):
    """What the agent sees: its calls before the kill and after the restart on the same
    journal and port all succeed with the same key; nobody reopens the session."""
    journal = tmp_path / "gateway.sqlite"
    messages = [{"role": "user", "content": "weather in four cities"}]
    proc, url = _start_gateway(journal)
    try:
        key = _admin(url, "/sessions", {"session_id": "keep"})["api_key"]
        for _ in range(2):
            _agent_turn(url, key, messages)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    proc, url2 = _start_gateway(journal, port=int(url.rsplit(":", 1)[1]))
    try:
        assert url2 == url
        for _ in range(3):
            _agent_turn(url, key, messages)  # the same key: no 401, no reopen step
        traces = _admin(url, "/sessions/keep/finish")["traces"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert messages[-1]["content"] == "All four cities are warm."
    (rec,) = traces
    assert [t["turn_index"] for t in rec["turns"]] == [0, 1, 2, 3, 4]
    assert [t["drift"] for t in rec["turns"]] == ["append"] * 5

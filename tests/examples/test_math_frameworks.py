"""Every framework's math agent, end to end: the local runtime runs the example file, the
real gateway serves its model calls from a scripted engine that calls the calculator, then
answers. Both turns are recorded, the tool's result is in the second prompt, no forks."""

from __future__ import annotations

import tomllib
import uuid
from typing import Any

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.config import load_config
from rollhub.runtimes.local import LocalRuntime
from rollhub_gateway.engines.scripted import scripted_logprob

from tests.examples.math_example import MATH, MODEL

EXAMPLES = [
    "agent.py",
    "openai_async_agent.py",
    "strands_agent.py",
    "langgraph_agent.py",
    "anthropic_agent.py",
]
TOMLS = {
    "openai_async_agent.py": "openai_async.toml",
    "strands_agent.py": "strands.toml",
    "langgraph_agent.py": "langgraph.toml",
    "anthropic_agent.py": "anthropic.toml",
}


@pytest.mark.parametrize("example", EXAMPLES)
async def test_tool_then_answer_through_the_gateway(example, gateway, scripted, ids, tmp_path):
    first = ids.tool_call("calculator", {"expression": "6 * 7"})
    second = ids.text("Answer: 42")
    scripted.add(first, second)
    sid = f"rh-{uuid.uuid4().hex}"
    session = gateway.open_session(sid)
    runtime = LocalRuntime(app=f"{MATH / example}:app", workers=1)
    async with AsyncRolloutClient(
        runtime, f"file://{tmp_path}", exp_id="exp", close_runtime=True
    ) as client:
        future = client.invoke(
            {"question": "What is 6 times 7?", "answer": 42, "capture_messages": True},
            session_id=sid,
            base_url=gateway.base_url,
            api_key=session.key,
            model_id=MODEL,
            sampling={"max_tokens": 128, "temperature": 0.7},
            timeout=120,
        )
        outcome = await future
    assert outcome.status == "ok", outcome.error
    result: dict[str, Any] = outcome.result
    assert result["rewards"] == 1.0
    assert result["answer"] == 42
    # both turns recorded exactly, in one record (a fork would start a second one)
    traces = gateway.traces(sid)
    assert len(traces) == 1
    record = traces[0]
    turns = [record.response_ids[t.start : t.end] for t in record.turns]
    assert turns == [first, second]
    assert record.turns[1].drift == "append"
    for t, turn in zip(record.turns, turns, strict=True):
        expected = [scripted_logprob(i, tok) for i, tok in enumerate(turn)]
        assert record.response_logprobs[t.start : t.end] == expected
    # the calculator's output reached the model in the second prompt
    assert len(scripted.prompts) == 2
    assert "42" in ids.tok.decode(scripted.prompts[1][len(scripted.prompts[0]) :])
    if example != "agent.py":  # the original agent predates conversation capture
        messages = result["messages"]
        assert messages[0]["role"] == "system"
        tool_messages = [m for m in messages if m["role"] == "tool"]
        assert [m["content"] for m in tool_messages] == ["42"]
        assert any(m.get("tool_calls") for m in messages if m["role"] == "assistant")


@pytest.mark.parametrize("example", sorted(TOMLS))
def test_each_example_has_a_runnable_config(example):
    path = MATH / TOMLS[example]
    config = load_config(path)
    assert config.runtime.name == "local"
    assert tomllib.loads(path.read_text())["runtime"]["app"] == f"{example}:app"
    assert (path.parent / example).is_file()

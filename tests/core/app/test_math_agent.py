"""The math example: its pure parts, and the whole agent over HTTP with the real openai SDK.

The model side is a loopback OpenAI-compatible server that scripts its replies; the agent
talks to it through the unmodified ``openai`` client, so requests and tool calls cross a
real HTTP boundary in the standard chat-completions format.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from rollhub.rollout import RESULT_META_KEY
from rollhub.testing.servers import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.core.app.app_support import API_KEY, wait_for

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "math"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_math_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return _load("agent")


# Pure parts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(12 + 7) * 3", "57"),
        ("2 ** 10", "1024"),
        ("2^3", "8"),
        ("10 / 4", "2.5"),
        ("1,000 * 2", "2000"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(2.5 * 3, 1)", "7.5"),
        ("max(3, 9, 4)", "9"),
        ("-5 + 2", "-3"),
    ],
)
def test_calculator_evaluates_arithmetic(agent: ModuleType, expression: str, expected: str) -> None:
    assert agent.run_tool("calculator", json.dumps({"expression": expression})) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "(1).__class__",
        "9 ** 9 ** 9",
        "1 / 0",
        "x + 1",
        "[1, 2]",
        "sqrt(-1)",
        "1" * 300,
    ],
)
def test_calculator_refuses_everything_else(agent: ModuleType, expression: str) -> None:
    assert agent.run_tool("calculator", json.dumps({"expression": expression})).startswith("error:")


def test_unknown_tool_and_bad_arguments(agent: ModuleType) -> None:
    assert agent.run_tool("shell", "{}").startswith("error: unknown tool")
    assert agent.run_tool("calculator", "not json").startswith("error:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the total is \\boxed{108}.", 108.0),
        ("Answer: -1,234.5", -1234.5),
        ("The answer is 42. (I first tried 40.)", 42.0),
        ("After 3 steps we get 17", 17.0),
        ("I don't know", None),
        (None, None),
    ],
)
def test_answer_extraction(agent: ModuleType, text: str | None, expected: float | None) -> None:
    assert agent.extract_answer(text) == expected


def test_reward(agent: ModuleType) -> None:
    assert agent.reward(108.0, 108) == 1.0
    assert agent.reward(0.1 + 0.2, 0.3) == 1.0
    assert agent.reward(107.0, 108) == 0.0
    assert agent.reward(None, 108) == 0.0 and agent.reward(5.0, None) == 0.0


def test_sampling_split(agent: ModuleType) -> None:
    direct, extra = agent.split_sampling({"temperature": 0.5, "max_tokens": 64, "top_k": 20})
    assert direct == {"temperature": 0.5, "max_tokens": 64} and extra == {"top_k": 20}


def test_dataset_is_deterministic_and_committed() -> None:
    make = _load("make_dataset")
    rows = make.generate(300, 1234)
    committed = [
        json.loads(line) for line in (EXAMPLE / "data" / "math.jsonl").read_text().splitlines()
    ]
    assert committed == rows
    assert len({r["id"] for r in rows}) == 300 and rows[0]["id"] == "math-0001"
    assert all(isinstance(r["answer"], (int, float)) and r["question"] for r in rows)
    assert make.generate(20, 7) != make.generate(20, 8)


# Over HTTP with a scripted model ------------------------------------------------------------


class ScriptedModel:
    """An OpenAI-compatible chat endpoint: a calculator call first, then a final answer."""

    def __init__(
        self, final: str = "The farmer has {result} apples. Answer: {result}", tools: bool = True
    ) -> None:
        self.final = final
        self.tools = tools
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self.lock:
            self.requests.append((dict(request.headers), body))
        last = body["messages"][-1]
        if "tools" in body and not self.tools:
            error = {
                "message": "cannot render tools",
                "type": "invalid_request_error",
                "param": "tools",
            }
            return JSONResponse({"error": error}, status_code=400)
        if not self.tools:
            message = {"role": "assistant", "content": "54 + 54 = 108. Answer: 108"}
            finish = "stop"
        elif last["role"] == "tool":
            message = {"role": "assistant", "content": self.final.format(result=last["content"])}
            finish = "stop"
        else:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "calculator",
                    "arguments": json.dumps({"expression": "54 + 9 * 6"}),
                },
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        return JSONResponse(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )


QUESTION = "A farmer has 54 apples. He buys 9 bags with 6 apples in each bag. How many apples does he have now?"


@pytest.mark.parametrize(("final", "reward"), [("Answer: {result}", 1.0), ("Answer: 107", 0.0)])
def test_agent_solves_over_http(
    agent: ModuleType,
    serve: Callable,
    make_rollout: Callable,
    read_doc: Callable,
    final: str,
    reward: float,
) -> None:
    model = ScriptedModel(final)
    with serve_app(model.app) as model_url:
        client = serve(agent.app)
        rollout = make_rollout(
            f"math-{int(reward)}",
            base_url=f"{model_url}/v1",
            sampling={"temperature": 0.7, "max_tokens": 128, "top_k": 20},
        )
        payload = {"question": QUESTION, "answer": 108, "id": "math-0001", "_rollout": rollout}
        assert client.post("/invocations", json=payload).json()["status"] == "processing"
        doc = wait_for(lambda: read_doc(f"math-{int(reward)}"))
    assert doc[RESULT_META_KEY]["status"] == "ok", doc[RESULT_META_KEY]["error"]
    assert doc["rewards"] == reward and doc["turns"] == 2
    assert doc["metrics"]["tool_calls"] == 1 and doc["metrics"]["finish_reason"] == "stop"
    assert len(model.requests) == 2
    headers, first = model.requests[0]
    assert headers["authorization"] == f"Bearer {API_KEY}"
    assert first["model"] == "test-model" and first["temperature"] == 0.7
    assert first["max_tokens"] == 128 and first["top_k"] == 20
    assert first["tools"][0]["function"]["name"] == "calculator"
    _, second = model.requests[1]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "108"}


def test_model_server_without_tool_support(
    agent: ModuleType, serve: Callable, make_rollout: Callable, read_doc: Callable
) -> None:
    model = ScriptedModel(tools=False)
    with serve_app(model.app) as model_url:
        client = serve(agent.app)
        rollout = make_rollout("math-nt", base_url=f"{model_url}/v1")
        client.post("/invocations", json={"question": QUESTION, "answer": 108, "_rollout": rollout})
        doc = wait_for(lambda: read_doc("math-nt"))
    assert doc[RESULT_META_KEY]["status"] == "ok", doc[RESULT_META_KEY]["error"]
    assert doc["rewards"] == 1.0 and doc["turns"] == 1
    assert doc["metrics"]["tools_offered"] is False and doc["metrics"]["tool_calls"] == 0
    assert [("tools" in body) for _, body in model.requests] == [True, False]
    assert "calculator" not in model.requests[1][1]["messages"][0]["content"]


def test_bad_payload_is_a_stored_validation_error(
    agent: ModuleType, serve: Callable, make_rollout: Callable, read_doc: Callable
) -> None:
    client = serve(agent.app)
    client.post("/invocations", json={"answer": 3, "_rollout": make_rollout("math-bad")})
    err = wait_for(lambda: read_doc("math-bad"))[RESULT_META_KEY]["error"]
    assert err["type"] == "ValidationError" and "question" in err["message"]


def test_runs_as_a_script(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE / "agent.py"), "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def ping() -> Any:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/ping", timeout=1).json()
            except httpx.HTTPError:
                return None

        assert wait_for(ping, timeout=30, interval=0.1)["status"] == "Healthy"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)

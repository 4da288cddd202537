"""The SWE example end to end without a model: scripted tool calls, real sandbox, real reward.

A loopback OpenAI-compatible server replays a fixed script of tool calls; the agent talks
to it through the unmodified ``openai`` SDK, its tools act on a real local sandbox, and the
sandbox reward hook then runs the repository's tests there, with the example's own
``rollhub.toml`` settings.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from rollhub.app import RolloutContext
from rollhub.config import load_config
from rollhub.episode import Episode
from rollhub.rollout import RolloutConfig
from rollhub.testing.servers import serve_app
from rollhub_sandbox import SandboxClient
from rollhub_sandbox.plugin import rollhub_collect_rewards
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "swe"
FIXED_MEDIAN = (EXAMPLE / "repos" / "stats" / "stats.py").read_text().replace(
    "    return ordered[mid]\n",
    "    if len(ordered) % 2:\n        return ordered[mid]\n"
    "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
)


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_swe_agent", EXAMPLE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sandbox_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sandboxes"
    monkeypatch.setenv("ROLLHUB_SANDBOX_ROOT", str(root))
    return root


def _hub(root: Path) -> SimpleNamespace:
    config = load_config(EXAMPLE / "rollhub.toml", env={
        "ROLLHUB_PLUGINS__SANDBOX__OPTIONS": f'{{ root = "{root}" }}',  # a TOML inline table
    })
    return SimpleNamespace(config=config)


class ScriptedModel:
    """Chat completions that replay tool calls from a script, then a final answer."""

    def __init__(self, script: list[tuple[str, dict[str, Any]]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self.lock:
            self.requests.append(body)
            step = len(self.requests) - 1
        if step < len(self.script):
            name, args = self.script[step]
            call = {"id": f"call_{step}", "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)}}
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "Fixed median."}, "stop"
        return JSONResponse({
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })


def _run_agent(agent: ModuleType, script: list[tuple[str, dict[str, Any]]],
               payload: dict[str, Any]) -> tuple[dict[str, Any], ScriptedModel]:
    model = ScriptedModel(script)
    with serve_app(model.app) as url:
        rollout = RolloutConfig(exp_id="swe", input_id=payload["id"], session_id="s-1",
                                result_store="file:///tmp/unused", base_url=f"{url}/v1",
                                model_id="test-model", sampling={"temperature": 0.5})
        result = agent.swe_agent(payload, RolloutContext(session_id="s-1", rollout=rollout))
    return result, model


def _episode(payload: dict[str, Any], result: dict[str, Any]) -> Episode:
    return Episode(episode_id="e-1", group_id=payload["id"], session_id="s-1", sample_index=0,
                   status="ok", payload=payload, result=result)


async def _reward(root: Path, payload: dict[str, Any], result: dict[str, Any]) -> dict[str, float]:
    value = rollhub_collect_rewards(episode=_episode(payload, result), hub=_hub(root))
    return await value


PAYLOAD = json.loads((EXAMPLE / "data" / "tasks.jsonl").read_text().splitlines()[0])


def test_dataset_rows_name_existing_repos(agent: ModuleType) -> None:
    rows = [json.loads(line) for line in (EXAMPLE / "data" / "tasks.jsonl").read_text().splitlines()]
    assert [agent.SWETask.model_validate(r).repo for r in rows] == ["stats", "slug"]
    with pytest.raises(ValueError, match="unknown repo"):
        agent.SWETask.model_validate({"repo": "../stats", "issue": "x"})


def test_tool_layer(agent: ModuleType, sandbox_root: Path) -> None:
    with SandboxClient("local") as client, client.start(str(EXAMPLE / "repos" / "stats")) as sb:
        tools = agent.SandboxTools(sb, max_chars=400)
        assert "def median" in tools.call("read_file", json.dumps({"path": "stats.py"}))
        assert tools.call("write_file", json.dumps({"path": "new/x.txt", "content": "ü"})) == \
            "wrote 2 bytes to new/x.txt"
        out = tools.call("run_shell", json.dumps({"command": "cat new/x.txt; exit 4"}))
        assert out.startswith("exit code 4\nstdout:\nü")
        assert tools.call("run_shell", json.dumps({"command": "seq 1 1000"})).endswith("more characters]")
        assert tools.call("read_file", json.dumps({"path": "../../etc/passwd"})).startswith("error:")
        assert tools.call("read_file", json.dumps({"path": "nope.py"})).startswith("error:")
        assert tools.call("read_file", "not json").startswith("error: bad arguments")
        assert tools.call("write_file", json.dumps({"path": "x"})).startswith("error: bad arguments")
        assert tools.call("delete_everything", "{}").startswith("error: unknown tool")
        assert (tools.calls, tools.errors) == (9, 5)


async def test_fix_through_the_tools_earns_reward_one(agent: ModuleType, sandbox_root: Path) -> None:
    script = [
        ("read_file", {"path": "stats.py"}),
        ("write_file", {"path": "stats.py", "content": FIXED_MEDIAN}),
        ("run_shell", {"command": f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q"}),
    ]
    result, model = await _in_thread(_run_agent, agent, script, PAYLOAD)
    assert result["turns"] == 4 and result["final_message"] == "Fixed median."
    assert result["metrics"]["tool_calls"] == 3 and result["metrics"]["tool_errors"] == 0
    assert model.requests[0]["tools"][0]["function"]["name"] == "run_shell"
    assert model.requests[0]["messages"][1]["content"] == PAYLOAD["issue"]
    assert "5 passed" in model.requests[3]["messages"][-1]["content"]
    assert (sandbox_root / result["sandbox_id"]).exists()  # left for the reward hook
    assert await _reward(sandbox_root, PAYLOAD, result) == {"tests": 1.0}
    assert not (sandbox_root / result["sandbox_id"]).exists()  # destroyed after scoring


async def test_no_fix_earns_zero(agent: ModuleType, sandbox_root: Path) -> None:
    result, _ = await _in_thread(_run_agent, agent, [("run_shell", {"command": "ls"})], PAYLOAD)
    assert await _reward(sandbox_root, PAYLOAD, result) == {"tests": 0.0}


async def test_editing_the_tests_earns_nothing(agent: ModuleType, sandbox_root: Path) -> None:
    script = [("run_shell", {"command": "rm -rf tests && mkdir tests && "
                                        "echo 'def test_ok(): pass' > tests/test_ok.py"})]
    result, _ = await _in_thread(_run_agent, agent, script, PAYLOAD)
    assert await _reward(sandbox_root, PAYLOAD, result) == {"tests": 0.0}


async def test_fraction_mode_counts_tests(agent: ModuleType, sandbox_root: Path) -> None:
    result, _ = await _in_thread(_run_agent, agent, [], PAYLOAD)
    hub = _hub(sandbox_root)
    hub.config.plugins.model_extra["sandbox"]["reward"] = "fraction"
    episode = _episode(PAYLOAD, result)
    assert await rollhub_collect_rewards(episode=episode, hub=hub) == {"tests": 3 / 5}
    assert episode.metrics["sandbox_tests"]["failed"] == 2


async def _in_thread(fn: Any, *args: Any) -> Any:
    # The agent's handler is synchronous (the app runs it in a worker thread): do the same.
    import asyncio

    return await asyncio.to_thread(fn, *args)

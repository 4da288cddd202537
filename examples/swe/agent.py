"""A SWE-style agent: fix a bug in a repository inside a sandbox, with shell and file tools.

Production-shaped code: the plain ``openai`` SDK, three tools (``run_shell``, ``read_file``,
``write_file``) that act on a rollhub sandbox, and a loop that runs tool calls until the
model answers. The agent does not score itself: it returns its sandbox id, and the
``rollhub-sandbox`` reward hook runs the task's tests in that sandbox
(``[plugins.sandbox]`` in ``rollhub.toml``).

Run it locally::

    python examples/swe/agent.py --port 8080

Sandboxes are local workspace directories under ``$ROLLHUB_SANDBOX_ROOT`` (default: the
system temp dir), the same place the reward hook looks; ``SWE_SANDBOX_PROVIDER`` picks
another provider.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field, field_validator
from rollhub.app import RolloutApp, RolloutContext
from rollhub_sandbox import Sandbox, SandboxArgumentError, SandboxClient, SandboxFileError

log = logging.getLogger("examples.swe.agent")

app = RolloutApp()

REPOS = Path(__file__).resolve().parent / "repos"

SYSTEM_PROMPT = (
    "You are a software engineer. The repository with the bug is your current directory. "
    "Use the tools to read the code, fix the bug and run the tests with "
    "`python -m pytest -q`. Do not change the tests. When the tests pass, reply with a "
    "one-sentence summary of the fix."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command in the repository; returns exit code, stdout, stderr.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "e.g. ls -R"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "relative path"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Replace a file of the repository with new content.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "relative path"},
                    "content": {"type": "string", "description": "the whole new file"},
                },
                "required": ["path", "content"],
            },
        },
    },
]

_OPENAI_SAMPLING = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "seed",
                    "stop", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs"}


class SWETask(BaseModel):
    """This agent's payload fields, validated before anything runs."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    repo: str = Field(description="template repository: a directory name under repos/")
    issue: str = Field(min_length=1, description="the bug report")
    max_turns: int = Field(12, ge=1, le=64)
    command_timeout: float = Field(60.0, gt=0, description="seconds per run_shell call")
    sandbox_ttl: float = Field(3600.0, gt=0, description="seconds before an abandoned sandbox is reaped")

    @field_validator("repo")
    @classmethod
    def _known_repo(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", value) or not (REPOS / value).is_dir():
            known = ", ".join(sorted(p.name for p in REPOS.iterdir() if p.is_dir()))
            raise ValueError(f"unknown repo {value!r}; known: {known}")
        return value


class SandboxTools:
    """The model's tools, acting on one sandbox. Every outcome is text for the model.

    A failing command, a missing file or a path outside the workspace is reported to the
    model (it can recover); only infrastructure failures raise.
    """

    def __init__(self, sandbox: Sandbox, *, max_chars: int = 6000,
                 command_timeout: float = 60.0) -> None:
        self.sandbox = sandbox
        self.max_chars = max_chars
        self.command_timeout = command_timeout
        self.calls = 0
        self.errors = 0

    def call(self, name: str, arguments: str) -> str:
        """Run one tool call (``arguments`` is the model's JSON string)."""
        self.calls += 1
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
            if name == "run_shell":
                out = self.run_shell(str(args["command"]))
            elif name == "read_file":
                out = self.read_file(str(args["path"]))
            elif name == "write_file":
                out = self.write_file(str(args["path"]), str(args["content"]))
            else:
                out = f"error: unknown tool {name!r}; tools: run_shell, read_file, write_file"
        except (ValueError, KeyError) as exc:
            out = f"error: bad arguments for {name}: {exc}"
        except (SandboxArgumentError, SandboxFileError) as exc:
            out = f"error: {exc}"
        self.errors += out.startswith("error:")
        return out

    def run_shell(self, command: str) -> str:
        result = self.sandbox.exec(command, timeout=self.command_timeout)
        head = "timed out" if result.timed_out else f"exit code {result.exit_code}"
        return self._clip(f"{head}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")

    def read_file(self, path: str) -> str:
        return self._clip(self.sandbox.read_file(path).decode("utf-8", errors="replace"))

    def write_file(self, path: str, content: str) -> str:
        data = content.encode()
        self.sandbox.write_file(path, data)
        return f"wrote {len(data)} bytes to {path}"

    def _clip(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars] + f"\n[... {len(text) - self.max_chars} more characters]"


def solve(llm: OpenAI, model: str, task: SWETask, sampling: dict[str, Any],
          tools: SandboxTools) -> dict[str, Any]:
    """The tool loop for one task; returns the result fields besides the sandbox id."""
    direct = {k: v for k, v in sampling.items() if k in _OPENAI_SAMPLING}
    extra = {k: v for k, v in sampling.items() if k not in _OPENAI_SAMPLING}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.issue},
    ]
    turns = 0
    final_text: str | None = None
    finish_reason = None
    while turns < task.max_turns:
        turns += 1
        response = llm.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                               extra_body=extra or None, **direct)
        choice = response.choices[0]
        finish_reason = choice.finish_reason
        message = choice.message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            final_text = message.content
            break
        for call in message.tool_calls:
            output = tools.call(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return {
        "turns": turns,
        "final_message": final_text,
        "metrics": {"tool_calls": tools.calls, "tool_errors": tools.errors,
                    "finish_reason": finish_reason, "answered": final_text is not None},
    }


def sandbox_client() -> SandboxClient:
    """The sandbox client: ``SWE_SANDBOX_PROVIDER`` (default ``local``)."""
    return SandboxClient(os.environ.get("SWE_SANDBOX_PROVIDER", "local"))


@app.rollout_entrypoint
def swe_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Start a sandbox from the task's repo, run the tool loop, return the sandbox id."""
    task = SWETask.model_validate(payload)
    rollout = context.rollout
    assert rollout is not None
    if not rollout.base_url or not rollout.model_id:
        raise ValueError("_rollout.base_url and _rollout.model_id are required by this agent")
    api_key = rollout.api_key.get_secret_value() if rollout.api_key else "EMPTY"
    client = sandbox_client()
    try:
        sandbox = client.create(str(REPOS / task.repo), ttl=task.sandbox_ttl)
        try:
            with OpenAI(base_url=rollout.base_url, api_key=api_key, max_retries=2) as llm:
                tools = SandboxTools(sandbox, command_timeout=task.command_timeout)
                out = solve(llm, rollout.model_id, task, rollout.sampling, tools)
        except BaseException:
            sandbox.destroy()  # no result will name it: do not leave it to the ttl
            raise
    finally:
        client.close()  # the sandbox itself lives on for the reward hook
    return {"sandbox_id": sandbox.id, "repo": task.repo, **out}


def main(argv: list[str] | None = None) -> None:
    """``python examples/swe/agent.py [--host H] [--port P]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    app.run(port=args.port, host=args.host)


if __name__ == "__main__":
    main()

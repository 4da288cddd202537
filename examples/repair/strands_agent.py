"""The repair agent written with Strands Agents: one ``@tool`` that runs a shell command in
the episode's sandbox, a worked example, and Strands' own agent loop.

The model comes from ``rollhub_frameworks.strands_model`` (the rollout's endpoint, model and
sampling). The agent does not score itself by reading its reply: after its loop stops, the
task's check runs in the sandbox and its exit code is the reward.

    rollhub run examples/repair/train.toml
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rollhub.app import RolloutApp, RolloutContext
from rollhub_frameworks import strands_model
from strands import Agent, tool
from tasks import SHOTS, SYSTEM_PROMPT, TOOL_DESCRIPTION, make_task
from workspace import Workspace, open_workspace

log = logging.getLogger("examples.repair.strands_agent")

app = RolloutApp()

#: the controls of the task's design: no tool (can anything pass without acting?), no
#: worked example (what the prompt alone gets); both on unless set to "0"
TOOLS = os.environ.get("REPAIR_TOOLS", "1") != "0"
SHOTS_ON = os.environ.get("REPAIR_SHOTS", "1") != "0"


def shell_tool(workspace: Workspace) -> Any:
    """The Strands tool bound to this episode's workspace."""

    @tool(name="shell", description=TOOL_DESCRIPTION)
    def shell(command: str) -> str:
        """Run a shell command in the workspace.

        Args:
            command: e.g. sh check.sh
        """
        return workspace.shell(command)

    return shell


def strands_messages(shots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worked example as Strands conversation messages (content blocks)."""
    messages: list[dict[str, Any]] = []
    for m in shots:
        if m["role"] == "tool":
            block = {"toolResult": {"toolUseId": m["tool_call_id"], "status": "success",
                                    "content": [{"text": m["content"]}]}}
            messages.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            messages.append({"role": "assistant", "content": [
                {"toolUse": {"toolUseId": c["id"], "name": "shell",
                             "input": {"command": c["command"]}}}
                for c in m["tool_calls"]
            ]})
        else:
            messages.append({"role": m["role"], "content": [{"text": m["content"]}]})
    return messages


@app.rollout_entrypoint
def repair_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Lay the task into a fresh sandbox, let the agent work, score with the check."""
    task = make_task(int(payload["seed"]), int(payload["depth"]))
    assert context.rollout is not None
    with open_workspace(task) as workspace:
        agent = Agent(
            model=strands_model(context.rollout),
            tools=[shell_tool(workspace)] if TOOLS else [],
            system_prompt=SYSTEM_PROMPT,
            messages=strands_messages(SHOTS) if TOOLS and SHOTS_ON else [],
            callback_handler=None,
        )
        try:
            stop = str(agent(task.prompt).stop_reason)
        except Exception as exc:  # the turn limit, a cut reply: the workspace is still scored
            log.info("agent stopped: %s: %s", type(exc).__name__, exc)
            stop = type(exc).__name__
        scored = workspace.score()
    return {
        **scored,
        "split": task.split,
        "metrics": {
            "tool_calls": len(workspace.commands),
            "commands": workspace.commands,
            "stop_reason": stop,
            "depth": task.depth,
            "sandbox": workspace.sandbox.provider,
        },
    }


if __name__ == "__main__":
    app.run()

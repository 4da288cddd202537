"""The repair agent written with LangGraph: LangGraph's prebuilt ReAct agent, one LangChain
``@tool`` that runs a shell command in the episode's sandbox, and the same worked examples.

The chat model comes from ``rollhub_frameworks.langgraph_chat_model`` (the rollout's
endpoint, model and sampling). As in the Strands twin, the reward is the task's check run in
the sandbox after the agent stops; the agent's reply is never read.

    rollhub run examples/repair/train-langgraph.toml
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from rollhub.app import RolloutApp, RolloutContext
from rollhub_frameworks import langgraph_chat_model
from tasks import SHOTS, SYSTEM_PROMPT, TOOL_DESCRIPTION, make_task
from workspace import Workspace, open_workspace

with warnings.catch_warnings():
    # newer LangGraph releases point create_react_agent at langchain.agents; same graph
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

log = logging.getLogger("examples.repair.langgraph_agent")

app = RolloutApp()

#: model calls an episode may make (the gateway's session policy caps them too)
MAX_TURNS = 5
TOOLS = os.environ.get("REPAIR_TOOLS", "1") != "0"
SHOTS_ON = os.environ.get("REPAIR_SHOTS", "1") != "0"


def shell_tool(workspace: Workspace) -> StructuredTool:
    """The LangChain tool bound to this episode's workspace."""

    def shell(command: str) -> str:
        return workspace.shell(command)

    return StructuredTool.from_function(shell, name="shell", description=TOOL_DESCRIPTION)


def langchain_messages(shots: list[dict[str, Any]]) -> list[BaseMessage]:
    """The worked examples as LangChain messages."""
    out: list[BaseMessage] = []
    for m in shots:
        if m["role"] == "user":
            out.append(HumanMessage(m["content"]))
        elif m["role"] == "tool":
            out.append(ToolMessage(m["content"], tool_call_id=m["tool_call_id"]))
        else:
            calls = [{"name": "shell", "args": {"command": c["command"]}, "id": c["id"]}
                     for c in m.get("tool_calls", [])]
            out.append(AIMessage(m["content"], tool_calls=calls))
    return out


@app.rollout_entrypoint
def repair_agent(payload: dict[str, Any], context: RolloutContext) -> dict[str, Any]:
    """Lay the task into a fresh sandbox, let the graph work, score with the check."""
    task = make_task(int(payload["seed"]), int(payload["depth"]))
    assert context.rollout is not None
    with open_workspace(task) as workspace:
        graph = create_react_agent(
            langgraph_chat_model(context.rollout),
            tools=[shell_tool(workspace)] if TOOLS else [],
            prompt=SYSTEM_PROMPT,
        )
        history = langchain_messages(SHOTS) if TOOLS and SHOTS_ON else []
        try:
            graph.invoke(
                {"messages": [*history, HumanMessage(task.prompt)]},
                {"recursion_limit": 2 * MAX_TURNS + 1},
            )
            stop = "end_turn"
        except Exception as exc:  # the turn limit, a refused call: the workspace is still scored
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

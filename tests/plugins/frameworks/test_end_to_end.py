"""The real Strands and LangGraph agents run a tool loop through a real rollhub gateway."""

from __future__ import annotations

from typing import Any

import pytest
from rollhub_frameworks import langgraph_chat_model, strands_model

from tests.plugins.frameworks.recording_backend import assert_sampling, assert_two_turns

ANSWER = "It is sunny in Paris."


def test_strands_agent_tool_loop_through_the_gateway(threaded, scripted, ids, rollout):
    from strands import Agent, tool

    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather of a city.

        Args:
            city: the city name
        """
        calls.append(city)
        return f"sunny in {city}"

    first, second = ids.tool_call("get_weather", {"city": "Paris"}), ids.text(ANSWER)
    scripted.add(first, second)
    agent = Agent(model=strands_model(rollout), tools=[get_weather], callback_handler=None)
    result = agent("What is the weather in Paris?")

    assert calls == ["Paris"]
    assert str(result).strip() == ANSWER
    assert result.stop_reason == "end_turn"
    assert_two_turns(threaded.traces("s1"), first, second)
    assert_sampling(scripted, "stream")  # Strands' OpenAI provider always streams
    # the tool's output reached the model in the second prompt
    assert "sunny in Paris" in ids.tok.decode(scripted.prompts[1])


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_react_agent_tool_loop_through_the_gateway(threaded, scripted, ids, rollout):
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        calls.append(city)
        return f"sunny in {city}"

    first, second = ids.tool_call("get_weather", {"city": "Paris"}), ids.text(ANSWER)
    scripted.add(first, second)
    graph = create_react_agent(langgraph_chat_model(rollout), tools=[get_weather])
    state: dict[str, Any] = graph.invoke({"messages": [("user", "What is the weather in Paris?")]})

    assert calls == ["Paris"]
    messages = state["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai"]
    assert messages[1].tool_calls[0]["args"] == {"city": "Paris"}
    assert messages[-1].content.strip() == ANSWER
    assert_two_turns(threaded.traces("s1"), first, second)
    assert_sampling(scripted, "generate")
    assert "sunny in Paris" in ids.tok.decode(scripted.prompts[1])

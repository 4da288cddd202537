"""Identifiers checked by pattern refuse a trailing newline (a ``$`` anchor lets it through)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rollhub.errors import ConfigError
from rollhub.policies import PolicyConfig
from rollhub.rollout import validate_key_part
from rollhub.runtimes.agentcore import AgentCoreRuntimeOptions

ARN = "arn:aws:bedrock-agentcore:us-east-1:123456789012:runtime/my_agent-1"


@pytest.mark.parametrize("tail", ["\n", "\r\n", "\n\n"])
def test_a_trailing_newline_is_refused(tail: str) -> None:
    with pytest.raises(ValueError, match="not a valid key part"):
        validate_key_part("abc" + tail, "session_id")
    with pytest.raises(ValidationError, match="name"):
        PolicyConfig(name="actor" + tail)
    with pytest.raises((ValidationError, ConfigError), match="runtime_arn"):
        AgentCoreRuntimeOptions(runtime_arn=ARN + tail)


def test_the_same_identifiers_without_it_are_accepted() -> None:
    assert validate_key_part("abc", "session_id") == "abc"
    assert PolicyConfig(name="actor").name == "actor"
    assert AgentCoreRuntimeOptions(runtime_arn=ARN).runtime_arn == ARN

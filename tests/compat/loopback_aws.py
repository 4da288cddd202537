"""The loopback AWS the compat tests run against: the S3 bucket and region every test
uses, and :class:`Plane`, the served local AgentCore data plane (the ``plane`` fixture).
"""

from __future__ import annotations

from dataclasses import dataclass

from rollhub.compat.agentcore_local import LocalAgentCore

BUCKET = "rollouts"
REGION = "us-west-2"


@dataclass
class Plane:
    """The served data plane: its URL and the app object (runtimes, calls, sessions)."""

    url: str
    app: LocalAgentCore

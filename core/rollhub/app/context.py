"""What a handler may receive besides its payload, and the AgentCore header names."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollhub.rollout import RolloutConfig

__all__ = [
    "CUSTOM_HEADER_PREFIX",
    "REQUEST_ID_HEADER",
    "SESSION_HEADER",
    "PingStatus",
    "RolloutContext",
    "forwardable_headers",
    "takes_context",
]

#: The AgentCore Runtime session header; the app makes up a UUID when it is absent.
SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
REQUEST_ID_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Request-Id"
#: Headers with this prefix reach the handler (AgentCore forwards them too).
CUSTOM_HEADER_PREFIX = "X-Amzn-Bedrock-AgentCore-Runtime-Custom-"

# Transport-level headers a handler has no business with.
_HIDDEN = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "content-length",
        "content-type",
        "transfer-encoding",
        "accept",
        "accept-encoding",
        "user-agent",
        "te",
        "upgrade",
        "proxy-authorization",
        "cookie",
    }
)


class PingStatus(enum.StrEnum):
    """What ``GET /ping`` reports; the values are the AgentCore Runtime's."""

    HEALTHY = "Healthy"
    HEALTHY_BUSY = "HealthyBusy"


@dataclass
class RolloutContext:
    """The second argument of a handler that takes ``(payload, context)``.

    :ivar session_id: the rollout's session id (``_rollout.session_id``), or for a plain
        entrypoint the session header (a fresh UUID when the caller sent none).
    :ivar rollout: the validated ``_rollout`` config; None for a plain ``@app.entrypoint``.
    :ivar request_headers: the request's headers minus transport ones (``Authorization``
        and ``X-Amzn-Bedrock-AgentCore-Runtime-Custom-*`` included).
    :ivar request: the Starlette request (plain entrypoints only: a rollout outlives it).
    """

    session_id: str
    rollout: RolloutConfig | None = None
    request_headers: dict[str, str] = field(default_factory=dict)
    request: Any = None


def forwardable_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers a handler sees: transport and AWS signing headers left out."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower == "authorization":
            out["Authorization"] = value
        elif lower.startswith(CUSTOM_HEADER_PREFIX.lower()):
            out[name] = value
        elif lower in _HIDDEN or lower.startswith(("x-amz-", "x-amzn-", "x-forwarded-")):
            continue
        else:
            out[name] = value
    return out


def takes_context(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` wants ``(payload, context)`` rather than ``(payload)``.

    Like AgentCore: a second parameter named ``context``; also any second parameter
    without a default, so ``(payload, ctx)`` works too.
    """
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) < 2:
        return False
    second = positional[1]
    return second.name == "context" or second.default is inspect.Parameter.empty

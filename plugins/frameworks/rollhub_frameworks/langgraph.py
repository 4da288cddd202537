"""LangGraph adapter: a LangChain ``ChatOpenAI`` that talks to the rollout's endpoint.

Example::

    from langgraph.prebuilt import create_react_agent
    from rollhub_frameworks import langgraph_chat_model

    @app.rollout_entrypoint
    def run(payload, context):
        graph = create_react_agent(langgraph_chat_model(context.rollout), tools=[...])
        state = graph.invoke({"messages": [("user", payload["prompt"])]})
        return {"answer": state["messages"][-1].content}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rollhub.rollout import RolloutConfig

from rollhub_frameworks.endpoint import endpoint_from_rollout, missing_extra

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

__all__ = ["LangGraphFramework", "langgraph_chat_model"]

log = logging.getLogger(__name__)

#: ``_rollout.sampling`` keys that ``ChatOpenAI`` takes as constructor fields.
_CHAT_OPENAI_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "n",
        "reasoning_effort",
    }
)


def langgraph_chat_model(
    rollout: RolloutConfig | Mapping[str, Any], *,
    extra_body: Mapping[str, object] | None = None, **overrides: object,
) -> ChatOpenAI:
    """A ``ChatOpenAI`` chat model for the rollout's model endpoint (LangGraph, LangChain).

    ``base_url``, ``api_key`` and ``model_id`` configure the client; ``_rollout.sampling``
    becomes the model's fields (``max_completion_tokens`` is read as ``max_tokens``; keys
    ``ChatOpenAI`` has no field for, such as ``top_k``, travel in ``extra_body``).
    ``overrides`` are ``ChatOpenAI`` keyword arguments applied on top; ``extra_body`` is
    merged key by key.

    Raises :class:`rollhub.errors.ConfigError` when ``_rollout.base_url`` or
    ``_rollout.model_id`` is missing, and :class:`rollhub.errors.PluginError` when
    ``langchain-openai`` is not installed.
    """
    try:
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise missing_extra("langgraph", "langgraph", exc) from exc
    endpoint = endpoint_from_rollout(rollout)
    sampling = dict(endpoint.sampling)
    if "max_completion_tokens" in sampling:
        sampling.setdefault("max_tokens", sampling.pop("max_completion_tokens"))
        sampling.pop("max_completion_tokens", None)
    fields = {k: v for k, v in sampling.items() if k in _CHAT_OPENAI_FIELDS}
    body: dict[str, object] = {
        **{k: v for k, v in sampling.items() if k not in _CHAT_OPENAI_FIELDS},
        **endpoint.extra_body,
        **dict(extra_body or {}),
    }
    kwargs: dict[str, Any] = {
        "base_url": endpoint.base_url,
        "api_key": endpoint.api_key,
        "model": endpoint.model_id,
        **fields,
    }
    if body:
        kwargs["extra_body"] = body
    kwargs.update(overrides)
    log.debug("langgraph chat model %s at %s", endpoint.model_id, endpoint.base_url)
    return ChatOpenAI(**kwargs)


class LangGraphFramework:
    """The ``langgraph`` framework component: builds LangChain chat models from a rollout."""

    name = "langgraph"

    def model_from_rollout(
        self, rollout: RolloutConfig | Mapping[str, Any], *,
        extra_body: Mapping[str, object] | None = None, **overrides: object,
    ) -> ChatOpenAI:
        """Same as :func:`langgraph_chat_model`."""
        return langgraph_chat_model(rollout, extra_body=extra_body, **overrides)

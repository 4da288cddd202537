"""Strands Agents adapter: an ``OpenAIModel`` that talks to the rollout's endpoint.

Example::

    from rollhub_frameworks import strands_model
    from strands import Agent

    @app.rollout_entrypoint
    def run(payload, context):
        agent = Agent(model=strands_model(context.rollout), tools=[...])
        return {"answer": str(agent(payload["prompt"]))}

Strands' OpenAI provider streams every request (with ``stream_options.include_usage``); the
rollhub gateway records streamed and non-streamed turns alike.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rollhub.rollout import RolloutConfig

from rollhub_frameworks.endpoint import endpoint_from_rollout, missing_extra

if TYPE_CHECKING:
    from strands.models.openai import OpenAIModel

__all__ = ["StrandsFramework", "strands_model"]

log = logging.getLogger(__name__)


def strands_model(rollout: RolloutConfig | Mapping[str, Any], *,
                  params: Mapping[str, Any] | None = None,
                  client_args: Mapping[str, object] | None = None, client: object = None,
                  **overrides: object) -> OpenAIModel:
    """A Strands ``OpenAIModel`` for the rollout's model endpoint.

    ``base_url`` and ``api_key`` go into the OpenAI client, ``model_id`` becomes the model,
    and ``_rollout.sampling`` becomes the request parameters (keys the OpenAI SDK does not
    know, such as ``top_k``, travel in ``extra_body``). ``overrides`` are ``OpenAIModel``
    keyword arguments applied on top; ``params`` and ``client_args`` are merged key by key.

    Raises :class:`rollhub.errors.ConfigError` when ``_rollout.base_url`` or
    ``_rollout.model_id`` is missing, and :class:`rollhub.errors.PluginError` when
    ``strands-agents[openai]`` is not installed.
    """
    try:
        from strands.models.openai import OpenAIModel
    except ImportError as exc:
        raise missing_extra("strands", "strands", exc) from exc
    endpoint = endpoint_from_rollout(rollout)
    merged: dict[str, Any] = dict(endpoint.sampling)
    if endpoint.extra_body:
        merged["extra_body"] = dict(endpoint.extra_body)
    user_params = dict(params or {})
    if "extra_body" in user_params and "extra_body" in merged:
        user_params["extra_body"] = {**merged["extra_body"], **user_params["extra_body"]}
    merged.update(user_params)
    kwargs: dict[str, Any] = {"model_id": endpoint.model_id, "params": merged}
    if client is None:
        args: dict[str, object] = {"base_url": endpoint.base_url, "api_key": endpoint.api_key}
        args.update(client_args or {})
        kwargs["client_args"] = args
    else:
        kwargs["client"] = client
        if client_args is not None:
            kwargs["client_args"] = client_args
    kwargs.update(overrides)
    log.debug("strands model %s at %s", endpoint.model_id, endpoint.base_url)
    return OpenAIModel(**kwargs)


class StrandsFramework:
    """The ``strands`` framework component: builds Strands models from a rollout."""

    name = "strands"

    def model_from_rollout(
        self, rollout: RolloutConfig | Mapping[str, Any], *,
        params: Mapping[str, Any] | None = None,
        client_args: Mapping[str, object] | None = None, client: object = None,
        **overrides: object,
    ) -> OpenAIModel:
        """Same as :func:`strands_model`."""
        return strands_model(rollout, params=params, client_args=client_args, client=client,
                             **overrides)

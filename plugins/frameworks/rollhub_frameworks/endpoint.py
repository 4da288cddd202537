"""The model endpoint of one rollout, as the framework adapters need it.

Both adapters talk to the rollout's OpenAI-compatible endpoint (normally a rollhub gateway
session): ``_rollout.base_url``, ``_rollout.api_key``, ``_rollout.model_id`` and the sampling
parameters in ``_rollout.sampling``. This module checks those fields once, with errors that
name the field and the fix, and splits the sampling parameters into the ones the OpenAI SDK
takes as keywords and the engine-specific rest (``top_k``, ``min_p``…), which must travel in
``extra_body`` because the SDK rejects unknown keywords.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from rollhub.errors import ConfigError, PluginError
from rollhub.rollout import RolloutConfig

__all__ = ["OPENAI_SAMPLING_KEYS", "RolloutEndpoint", "endpoint_from_rollout", "missing_extra"]

log = logging.getLogger(__name__)

#: Sampling keys that ``chat.completions.create`` accepts as keyword arguments.
OPENAI_SAMPLING_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
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

#: A local OpenAI-compatible server without auth still needs a non-empty key in the SDKs.
_NO_KEY = "EMPTY"


@dataclass(frozen=True)
class RolloutEndpoint:
    """Where a rollout's model lives and how to sample from it."""

    base_url: str
    model_id: str
    api_key: str = field(repr=False)
    #: sampling parameters the OpenAI SDK knows by name
    sampling: dict[str, Any] = field(default_factory=dict)
    #: the rest of ``_rollout.sampling``, sent in the request body as-is
    extra_body: dict[str, Any] = field(default_factory=dict)


def endpoint_from_rollout(rollout: RolloutConfig | Mapping[str, Any]) -> RolloutEndpoint:
    """Check a rollout's endpoint fields and return them ready for an OpenAI client.

    ``rollout`` is ``context.rollout`` inside ``@app.rollout_entrypoint`` (or the raw
    ``_rollout`` dict). A missing ``base_url`` or ``model_id`` is a :class:`ConfigError`
    naming the field and the fix; a missing ``api_key`` is allowed (local servers without
    auth), and a placeholder key is sent.
    """
    if isinstance(rollout, Mapping):
        try:
            rollout = RolloutConfig.model_validate(dict(rollout))
        except ValidationError as exc:
            raise ConfigError(f"_rollout is invalid: {exc}", field="_rollout") from exc
    if not isinstance(rollout, RolloutConfig):
        raise ConfigError(
            f"expected the rollout config (context.rollout), got {type(rollout).__name__}; "
            f"pass context.rollout from inside @app.rollout_entrypoint",
            field="_rollout",
        )
    for name, example in (
        ("base_url", "the gateway session URL, e.g. http://127.0.0.1:8000/v1"),
        ("model_id", "the model name the endpoint serves"),
    ):
        if not getattr(rollout, name):
            raise ConfigError(
                f"_rollout.{name} is not set, so the agent has no model to call; the trainer "
                f"side must put {example} into _rollout.{name} (a token source such as the "
                f"rollhub gateway fills it when it opens the session)",
                field=f"_rollout.{name}",
            )
    sampling = dict(rollout.sampling)
    known = {k: v for k, v in sampling.items() if k in OPENAI_SAMPLING_KEYS}
    extra = {k: v for k, v in sampling.items() if k not in OPENAI_SAMPLING_KEYS}
    key = rollout.api_key.get_secret_value() if rollout.api_key is not None else _NO_KEY
    return RolloutEndpoint(
        base_url=str(rollout.base_url),
        model_id=str(rollout.model_id),
        api_key=key,
        sampling=known,
        extra_body=extra,
    )


def missing_extra(framework: str, extra: str, exc: ImportError) -> PluginError:
    """The error for a framework package that is not installed, with the install command."""
    return PluginError(
        f"the {framework} adapter needs {exc.name or 'its framework package'}; install it "
        f"with: pip install 'rollhub-frameworks[{extra}]'",
        framework=framework,
    )

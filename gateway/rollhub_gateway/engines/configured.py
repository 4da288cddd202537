"""Which engine a run's config has its gateway sample with, read as typed options.

A trainer that must train the very model the gateway samples (the torch trainer) reads
the ``[token_source]`` section through :func:`gateway_options` and
:func:`transformers_options` instead of walking its option dictionaries: the same models
validate them here as when the gateway is built, so a misspelt key fails the same way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError
from rollhub.validation import explain, first_loc

from rollhub_gateway.token_source import GatewaySourceOptions

from .transformers_engine import TransformersOptions

__all__ = ["gateway_options", "in_process", "transformers_options"]

M = TypeVar("M", bound=BaseModel)


def gateway_options(config: RollhubConfig | None) -> GatewaySourceOptions | None:
    """The validated options of ``config``'s ``[token_source]`` when it is the gateway.

    :returns: None when there is no config or the token source is another one.
    :raises ConfigError: the options do not validate (naming ``token_source.key``).
    """
    if config is None or config.token_source.name != "gateway":
        return None
    return _validated(GatewaySourceOptions, config.token_source.options, "token_source")


def in_process(options: GatewaySourceOptions) -> bool:
    """Whether the gateway runs in this process (not remote at ``url``, not a pool)."""
    return options.url is None and options.pool is None


def transformers_options(options: GatewaySourceOptions) -> TransformersOptions | None:
    """The validated options of the gateway's ``transformers`` engine; None for another.

    :raises ConfigError: they do not validate (naming ``token_source.engine.options.key``).
    """
    if options.engine.name != "transformers":
        return None
    return _validated(TransformersOptions, options.engine.options, "token_source.engine.options")


def _validated(model: type[M], options: dict[str, Any], section: str) -> M:
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(
            explain(exc, model, section, prefix=section), field=first_loc(exc, prefix=section)
        ) from None

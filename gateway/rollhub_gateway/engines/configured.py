"""Which engine a run's config has its gateway sample with, read as typed options.

A trainer that must train the very model the gateway samples (the torch and TRL trainers)
reads the ``[token_source]`` section through :func:`engine_model`, :func:`gateway_options`
and :func:`transformers_options` instead of walking its option dictionaries: the same
models validate them here as when the gateway is built, so a misspelt key fails the same
way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError
from rollhub.registry import ComponentRegistry, build_options
from rollhub.training.roles import TrainerRole, role_of
from rollhub.validation import explain, first_loc

from rollhub_gateway.token_source import GatewaySourceOptions

from .transformers_engine import TransformersOptions

__all__ = [
    "check_engine",
    "engine_model",
    "gateway_options",
    "in_process",
    "transformers_options",
]

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


def engine_model(config: RollhubConfig | None) -> str:
    """The model ``config``'s gateway samples, which a trainer of this process trains: the
    ``transformers`` engine's ``model``, another engine's ``model`` option where it has
    one, else SmolLM2 (also without a config or a gateway).

    :raises ConfigError: the gateway's or the ``transformers`` engine's options do not
        validate.
    """
    from rollhub_gateway.models import SMOLLM2

    gateway = gateway_options(config)
    if gateway is None:
        return SMOLLM2
    engine = transformers_options(gateway)
    if engine is not None:
        return engine.model
    return str(gateway.engine.options.get("model") or SMOLLM2)


def check_engine(config: RollhubConfig, registry: ComponentRegistry) -> None:
    """Refuse, before anything runs, an engine the gateway could not build: an unknown
    sampling backend, options it does not take, a model that is not on disk (unless a
    launched backend supplies the model). A remote gateway's engine is its own business.

    :raises ConfigError: naming ``token_source.…`` and the fix.
    """
    from rollhub_gateway.models import resolve_model

    gateway = gateway_options(config)
    if gateway is None or gateway.url is not None:
        return
    name = gateway.engine.name
    cls = registry.get("sampling_backend", name, field="token_source.engine.name")
    options = dict(gateway.engine.options)
    if "model" in getattr(getattr(cls, "Options", None), "model_fields", {}):
        options.setdefault("model", gateway.model)  # as the gateway fills it in
    build_options(registry, "sampling_backend", name, options,
                  section="token_source.engine.options")  # fmt: skip
    trainer = registry.get("trainer", config.trainer.name, field="trainer.name")
    if role_of(trainer) is TrainerRole.LAUNCHED_BACKEND:
        return  # verl and slime hand the gateway their own checkpoint as its model
    # the gateway's model is its tokenizer, always read from disk; the transformers engine
    # loads its own from disk too (a remote engine's model is only a name it serves)
    models = {"token_source.model": gateway.model}
    if name == "transformers":
        models["token_source.engine.options.model"] = str(options["model"])
    for field, model in models.items():
        try:
            resolve_model(model)
        except ConfigError as exc:
            raise ConfigError(f"{field}: {exc}", field=field) from None


def _validated(model: type[M], options: dict[str, Any], section: str) -> M:
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(
            explain(exc, model, section, prefix=section), field=first_loc(exc, prefix=section)
        ) from None

"""``[[policies]]`` checked before anything runs: what serves them and what trains them.

- The token source must route calls by model name: only the ``gateway`` one does.
- The trainer must be able to train several policies: a policy trainer is built once
  per trainable policy (each policy's ``trainer`` options are validated here); a trainer
  that refuses (its ``policies_refusal``, e.g. a backend that drives its own loop over one
  model) is refused with its reason, never silently run with one policy.
- A trainable policy starts from the served model: ``weights`` are for frozen policies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollhub.errors import ConfigError
from rollhub.plugin_host.markers import hookimpl
from rollhub.registry import ComponentRegistry, build_options
from rollhub.training.roles import TrainerRole, role_of

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

__all__ = ["rollhub_check_config"]


@hookimpl(tryfirst=True)  # what cannot run at all is said before what is missing to run it
def rollhub_check_config(config: RollhubConfig, registry: ComponentRegistry) -> None:
    """Refuse ``[[policies]]`` that the configured token source or trainer cannot take."""
    policies = config.policies
    if not policies:
        return
    if config.token_source.name != "gateway":
        raise ConfigError(
            f"[[policies]] need a token source that routes each call by its model name: "
            f"token_source {config.token_source.name!r} does not; use the 'gateway' token "
            f"source",
            field="token_source.name",
        )
    for i, policy in enumerate(policies):
        if policy.trainable and policy.weights:
            raise ConfigError(
                f"policies[{i}] ({policy.name!r}) is trainable and has weights; a trainable "
                f"policy starts from the served model: drop weights, or set trainable = false",
                field=f"policies.{policy.name}.weights",
            )
        if policy.weights and not config.path(policy.weights).expanduser().is_file():
            raise ConfigError(
                f"policies[{i}] ({policy.name!r}): weights = {policy.weights!r} does not exist "
                f"(paths are relative to the config file's directory); point it at a "
                f"checkpoint's policy.safetensors",
                field=f"policies.{policy.name}.weights",
            )
    cls = registry.get("trainer", config.trainer.name, field="trainer.name")
    role = role_of(cls)
    refusal = getattr(cls, "policies_refusal", None)
    if refusal is None and role in (TrainerRole.LOOP_DRIVER, TrainerRole.LAUNCHED_BACKEND):
        refusal = "it drives its own training loop, which trains one model"
    if refusal is not None:
        raise ConfigError(
            f"trainer {config.trainer.name!r} cannot train several [[policies]]: {refusal}. "
            f"Train them with a trainer the core's loop drives (e.g. 'torch'), or run one "
            f"policy",
            field="trainer.name",
        )
    if role is TrainerRole.POLICY_TRAINER:
        for policy in policies:
            if policy.trainable:
                build_options(
                    registry,
                    "trainer",
                    config.trainer.name,
                    {**config.trainer.options, **policy.trainer},
                    section=f"policies.{policy.name}.trainer",
                )

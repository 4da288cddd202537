"""``[plugins.verl]``: how ``rollhub verl`` launches verl and how rows and episodes cross over.

Example ``rollhub.toml``::

    [trainer]
    name = "verl"

    [plugins.verl]
    reward_source = "rollhub"         # the agent's rewards; "verl": verl's reward function

    [plugins.verl.overrides]          # Hydra overrides of verl's ppo_trainer config
    "algorithm.adv_estimator" = "grpo"
    "data.train_files" = "data/train.parquet"
    "actor_rollout_ref.model.path" = "Qwen/Qwen2.5-0.5B-Instruct"
    "actor_rollout_ref.rollout.n" = 4

The same keys under ``[trainer]`` (the older spelling) still work, with a warning
(:func:`rollhub.training.launch_settings.launch_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator
from rollhub.training import TrainerOptions
from rollhub.training.launch_settings import launch_settings

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

__all__ = ["PLUGIN", "VerlOptions", "flatten_overrides", "verl_settings"]

#: the plugin's name: its config table is ``[plugins.verl]``
PLUGIN = "verl"


class VerlOptions(TrainerOptions):
    """The keys of ``[plugins.verl]``."""

    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Hydra overrides of verl's config: dotted keys, or nested tables",
    )
    args: list[str] = Field(
        default_factory=list,
        description="raw Hydra override strings appended as given (e.g. '+ray_kwargs.x=1')",
    )
    agent_name: str = Field("rollhub", description="name of the agent loop in verl's registry")
    messages_field: str = Field(
        "messages", description="payload key that receives the row's raw_prompt messages"
    )
    reward_source: Literal["rollhub", "verl"] = Field(
        "rollhub",
        description="rollhub: the episode's reward is reward_score; verl: verl's reward "
        "function scores the responses",
    )
    entry_point: str = Field(
        "verl.trainer.main_ppo", description="module run with python -m to start training"
    )

    @field_validator("overrides")
    @classmethod
    def _flat(cls, value: dict[str, Any]) -> dict[str, Any]:
        return flatten_overrides(value)


def verl_settings(config: RollhubConfig) -> VerlOptions:
    """The validated ``[plugins.verl]`` settings of ``config`` (or the older ``[trainer]``
    spelling of them, with a warning).

    :raises ConfigError: naming the bad key (``plugins.verl.<key>``) and the fix.
    """
    return launch_settings(config, PLUGIN, VerlOptions)


def flatten_overrides(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c.d": 2}`` → ``{"a.b": 1, "c.d": 2}`` (tables become dotted keys)."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(flatten_overrides(item, dotted + "."))
        else:
            out[dotted] = item
    return out

"""``[plugins.slime]``: how slime samples become payloads and episodes become samples.

Example ``rollhub.toml``::

    [trainer]
    name = "slime"

    [plugins.slime]
    prompt_field = "question"     # payload key that receives Sample.prompt
    label_field = "answer"        # payload key that receives Sample.label

The same keys under ``[trainer]`` (the older spelling) still work, with a warning
(:func:`rollhub.training.launch_settings.launch_settings`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, field_validator
from rollhub.training import TrainerOptions
from rollhub.training.launch_settings import launch_settings

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig

__all__ = ["PLUGIN", "SlimeOptions", "slime_settings"]

#: the plugin's name: its config table is ``[plugins.slime]``
PLUGIN = "slime"


class SlimeOptions(TrainerOptions):
    """The keys of ``[plugins.slime]``."""

    prompt_field: str = Field("prompt", description="payload key that receives Sample.prompt")
    label_field: str = Field("label", description="payload key that receives Sample.label")
    response_field: str | None = Field(
        "final_message", description="result key whose text becomes Sample.response"
    )
    generate_returns_list: bool = Field(
        True,
        description="the custom generate function always returns list[Sample], so a batch "
        "where some rollouts fork still has one shape",
    )
    drop_empty: bool = Field(
        False,
        description="kept so older configs load; only false is accepted (failed rollouts "
        "reach slime as placeholders it does not learn from)",
    )

    @field_validator("drop_empty")
    @classmethod
    def _keep_every_rollout(cls, value: bool) -> bool:
        # slime builds its optimizer steps from the sample count (dp_schedule.py asserts
        # samples // global_batch_size >= 1 and drops the remainder): a step short of
        # rollout_batch_size x n_samples_per_prompt crashes or loses rollouts
        if value:
            raise ValueError(
                "drop_empty = true is no longer supported: leaving out failed rollouts makes "
                "slime's step short of rollout_batch_size x n_samples_per_prompt samples, so "
                "slime's scheduler asserts or drops rollouts; failed rollouts now reach slime "
                "as placeholders with remove_sample set. Remove drop_empty"
            )
        return value


def slime_settings(config: RollhubConfig) -> SlimeOptions:
    """The validated ``[plugins.slime]`` settings of ``config`` (or the older ``[trainer]``
    spelling of them, with a warning).

    :raises ConfigError: naming the bad key (``plugins.slime.<key>``) and the fix.
    """
    return launch_settings(config, PLUGIN, SlimeOptions)

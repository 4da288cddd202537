"""The ``slime`` trainer component: where the slime backend's settings live.

slime drives its own training loop, so this trainer (a
:class:`~rollhub.training.LaunchedBackend`) does not consume groups the way ``rollhub run``
feeds them, and ``rollhub run`` refuses it: slime calls
:func:`rollhub_slime.rollout.generate_rollout` (or the per-sample
:func:`rollhub_slime.rollout.generate`), which asks the hub for groups and converts them
itself. ``[trainer] name = "slime"`` selects this component so that
``rollhub config check`` validates the options below, and the rollout function reads them
from the started hub.

Example ``rollhub.toml``::

    [trainer]
    name = "slime"
    prompt_field = "question"     # payload key that receives Sample.prompt
    label_field = "answer"        # payload key that receives Sample.label
"""

from __future__ import annotations

import logging

from pydantic import Field
from rollhub.training import LaunchedBackend, TrainerOptions

log = logging.getLogger(__name__)

__all__ = ["SlimeOptions", "SlimeTrainer"]


class SlimeOptions(TrainerOptions):
    """How slime samples become payloads and episodes become samples."""

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
        True, description="leave out samples of rollouts that produced no tokens (failed)"
    )


class SlimeTrainer(LaunchedBackend):
    """Holds the slime options; slime's own loop consumes the episodes."""

    name = "slime"
    Options = SlimeOptions
    options: SlimeOptions
    policies_refusal = (
        "slime's loop trains one Megatron actor and its SGLang router serves that actor's "
        "weights; the samples of a second policy would be trained into that actor"
    )
    launch_hint = (
        "the slime trainer is driven by slime's training loop: launch slime with "
        "--rollout-function-path rollhub_slime.rollout.generate_rollout (see "
        "python -m rollhub_slime.launch) instead of 'rollhub run'"
    )

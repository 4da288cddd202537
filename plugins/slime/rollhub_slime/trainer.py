"""The ``slime`` trainer component: selects the slime backend, which drives its own loop.

slime drives its own training loop, so this trainer (a
:class:`~rollhub.training.LaunchedBackend`) does not consume groups the way ``rollhub run``
feeds them, and ``rollhub run`` refuses it: slime calls
:func:`rollhub_slime.rollout.generate_rollout` (or the per-sample
:func:`rollhub_slime.rollout.generate`), which asks the hub for groups and converts them
itself. ``[trainer] name = "slime"`` selects this component; how samples and episodes
cross over lives in ``[plugins.slime]`` (:mod:`rollhub_slime.settings`), which the rollout
functions read from the started hub's config.

Its ``Options`` are the same keys, so the older spelling (them under ``[trainer]``) still
validates; :func:`rollhub_slime.settings.slime_settings` reads either spelling.
"""

from __future__ import annotations

from rollhub.training import LaunchedBackend

from rollhub_slime.settings import SlimeOptions

__all__ = ["SlimeTrainer"]


class SlimeTrainer(LaunchedBackend):
    """Selects slime, whose own loop consumes the episodes; its settings are
    ``[plugins.slime]``."""

    name = "slime"
    # the same keys as [plugins.slime], so their older spelling under [trainer] validates
    Options = SlimeOptions
    policies_refusal = (
        "slime's loop trains one Megatron actor and its SGLang router serves that actor's "
        "weights; the samples of a second policy would be trained into that actor"
    )
    launch_hint = (
        "the slime trainer is driven by slime's training loop: launch slime with "
        "--rollout-function-path rollhub_slime.rollout.generate_rollout (see "
        "python -m rollhub_slime.launch) instead of 'rollhub run'"
    )

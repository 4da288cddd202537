"""Hook implementations of rollhub-trl (entry point ``rollhub`` → this module)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rollhub import hookimpl
from rollhub.registry import ComponentRegistry

if TYPE_CHECKING:
    from rollhub.config import RollhubConfig


@hookimpl
def rollhub_register_components(registry: ComponentRegistry) -> None:
    """The ``trl`` trainer (trl is imported when it starts)."""
    from rollhub_trl.trainer import TrlTrainer

    registry.add_trainer(TrlTrainer)


@hookimpl
def rollhub_check_config(config: RollhubConfig) -> None:
    """Settings of the core's training loop that TRL's loop cannot honour are refused, not
    dropped: ``training.stratify`` (TRL's sampler draws each step's prompts) and
    ``experiment.max_staleness`` above 0 (TRL samples and trains on-policy).

    :raises ConfigError: naming the field and the fix.
    """
    from rollhub.errors import ConfigError

    if config.trainer.name != "trl":
        return
    if config.training.stratify is not None:
        raise ConfigError(
            f"training.stratify = {config.training.stratify!r}: TRL's GRPOTrainer draws each "
            "step's prompts itself (shuffled with experiment.seed unless training.shuffle = "
            "false), so no field's proportions can be kept; drop training.stratify, or train "
            "with trainer 'torch'",
            field="training.stratify",
        )
    if config.experiment.max_staleness:
        raise ConfigError(
            f"experiment.max_staleness = {config.experiment.max_staleness}: TRL's GRPOTrainer "
            "samples and trains on-policy, one step's episodes from the weights of the step "
            "before; set max_staleness = 0, or train with trainer 'torch' or 'tinker'",
            field="experiment.max_staleness",
        )


@hookimpl
def rollhub_trained_weights(path: Path) -> Path | None:
    """TRL's checkpoint at ``path`` (a ``checkpoint-N`` folder) or the newest one in the run
    directory ``path``, when it holds the trained parameters (a run with ``train_layers``
    set; one that trained every parameter keeps TRL's full save, for ``from_pretrained``)."""
    from rollhub_trl.resume import OUTPUT_DIR, checkpoint_folder, checkpoint_step
    from rollhub_trl.trained_weights import POLICY_FILE

    step = checkpoint_step(path / OUTPUT_DIR)  # the one a resume continues from
    folder = path if step is None else checkpoint_folder(path / OUTPUT_DIR, step)
    return folder if (folder / POLICY_FILE).is_file() else None

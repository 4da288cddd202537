"""What the torch trainer keeps in a checkpoint: its trained parameters and Adam's state.

The frozen parameters are the base model's and are not written: a checkpoint holds what
resuming and ``rollhub eval --checkpoint`` need (``policy.safetensors``, the trained
parameters by name; ``optimizer.pt``; ``model.json``, the model they belong to).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollhub.errors import ConfigError, RollhubError

__all__ = [
    "OPTIMIZER_FILE", "POLICY_FILE", "TorchTrainingError", "check_resumable", "restore_trained",
    "save_trained",
]

POLICY_FILE = "policy.safetensors"
OPTIMIZER_FILE = "optimizer.pt"


class TorchTrainingError(RollhubError):
    """A training step failed inside torch (the original error is the ``__cause__``)."""


def save_trained(directory: Path, trained: dict[str, Any], optimizer: Any, model: str) -> None:
    """Write the ``trained`` parameters, the ``optimizer``'s state and the model's name."""
    import torch
    from safetensors.torch import save_file

    save_file({k: p.detach().contiguous() for k, p in trained.items()},
              str(directory / POLICY_FILE))  # fmt: skip
    torch.save(optimizer.state_dict(), directory / OPTIMIZER_FILE)
    (directory / "model.json").write_text(json.dumps({"model": model}))


def check_resumable(
    directory: Path, state: dict[str, Any], model: str, train_layers: int | None
) -> None:
    """:raises ConfigError: the checkpoint trained another model or another number of
    layers than the config says."""
    if state.get("model", model) != model:
        raise ConfigError(f"checkpoint {directory} trained {state['model']!r}, the config's "
                          f"model is {model!r}; resume with the same model",
                          field="trainer.model")  # fmt: skip
    if state.get("train_layers", train_layers) != train_layers:
        raise ConfigError(
            f"checkpoint {directory} trained train_layers={state.get('train_layers')}, "
            f"the config says {train_layers}; resume with the same value",
            field="trainer.train_layers",
        )


def restore_trained(directory: Path, trained: dict[str, Any], optimizer: Any) -> None:
    """Copy the checkpoint's parameters into ``trained`` and its state into ``optimizer``.

    :raises TorchTrainingError: the checkpoint lacks one of the trained parameters.
    """
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(directory / POLICY_FILE))
    missing = sorted(set(trained) - set(tensors))
    if missing:
        raise TorchTrainingError(f"checkpoint {directory} lacks {missing[0]!r}")
    with torch.no_grad():
        for name, value in tensors.items():
            trained[name].copy_(value)
    optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE))

"""What a TRL checkpoint keeps of the model: the parameters the run trains.

With ``train_layers`` set (8 by default) only the top decoder layers and the final norm
change; the rest is the base model, loaded again on resume. So a ``checkpoint-N`` folder
holds ``policy.safetensors`` (the trained parameters by name, the torch trainer's format,
which ``rollhub eval --checkpoint`` loads into the engine) and ``model.json`` (the base
model and ``train_layers``), beside TRL's optimizer, scheduler, RNG and trainer state.
For SmolLM2-135M that is 0.1 GB of parameters instead of TRL's 0.54 GB full model. A run
that trains every parameter keeps TRL's own full save, and so does the final ``model``
folder of every run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["MODEL_FILE", "POLICY_FILE", "load_trained", "save_trained", "trained_parameters"]

POLICY_FILE = "policy.safetensors"
MODEL_FILE = "model.json"


def trained_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter] | None:
    """The parameters that train, by name; None when every one does."""
    named = dict(model.named_parameters())
    trained = {name: p for name, p in named.items() if p.requires_grad}
    return None if len(trained) == len(named) else trained


def save_trained(
    folder: Path, model: torch.nn.Module, base_model: str, train_layers: int | None
) -> bool:
    """Write ``model``'s trained parameters and what they belong to into ``folder``;
    False (nothing written) when every parameter trains."""
    from safetensors.torch import save_file

    trained = trained_parameters(model)
    if trained is None:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    # each file appears whole or not at all (renamed into place): a process killed while
    # saving leaves no half-written parameters for a resume or an eval to read
    record = {"model": base_model, "train_layers": train_layers}
    part = folder / f".{MODEL_FILE}.part"
    part.write_text(json.dumps(record))
    part.replace(folder / MODEL_FILE)
    part = folder / f".{POLICY_FILE}.part"
    save_file({k: p.detach().contiguous() for k, p in trained.items()}, str(part))
    part.replace(folder / POLICY_FILE)
    return True


def load_trained(
    folder: Path, model: torch.nn.Module, base_model: str, train_layers: int | None
) -> bool:
    """Copy the trained parameters in ``folder`` into ``model``; False when ``folder``
    holds none (a full save, which TRL loads itself).

    :raises ConfigError: the checkpoint trained another model or other layers than this
        run trains (its parameters would land on the wrong base, with no error), or does
        not say which.
    """
    import torch
    from safetensors.torch import load_file

    if not (folder / POLICY_FILE).is_file():
        return False
    try:
        record = json.loads((folder / MODEL_FILE).read_text())
        trained_model, trained_layers = record["model"], record["train_layers"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"checkpoint {folder}: {MODEL_FILE} is missing or unreadable ({exc}), so the "
            f"model its parameters belong to is unknown; resume from another checkpoint or "
            f"start a new run directory", field="trainer.model",
        ) from exc  # fmt: skip
    if trained_model != base_model:
        raise ConfigError(
            f"checkpoint {folder} trained {trained_model!r}, this run's model is "
            f"{base_model!r}; resume with the model it trained", field="trainer.model",
        )  # fmt: skip
    if trained_layers != train_layers:
        raise ConfigError(
            f"checkpoint {folder} trained train_layers={trained_layers}, this run trains "
            f"{train_layers}; resume with the same value", field="trainer.train_layers",
        )  # fmt: skip
    trained = trained_parameters(model) or dict(model.named_parameters())
    tensors = load_file(str(folder / POLICY_FILE))
    if set(tensors) != set(trained):
        missing, unknown = sorted(set(trained) - set(tensors)), sorted(set(tensors) - set(trained))
        raise ConfigError(
            f"checkpoint {folder} does not hold this model's trained parameters (missing: "
            f"{missing[:3]}, unknown: {unknown[:3]}); resume with the model it trained",
            field="trainer.model",
        )
    with torch.no_grad():
        for name, value in tensors.items():
            trained[name].copy_(value)
    return True

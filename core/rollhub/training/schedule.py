"""Which prompts each training step trains on.

Prompts are laid out once as a schedule: ``epochs`` passes, each shuffled with
``experiment.seed + epoch``, optionally stratified so every batch holds a field's values in
proportion (``training.stratify``). The loop (:mod:`rollhub.training.loop`) takes step
``s``'s batch from entries ``[s·B, (s+1)·B)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from rollhub.config import RollhubConfig
from rollhub.errors import ConfigError

__all__ = ["check_stratify", "planned_steps", "schedule"]


def schedule(
    payloads: Sequence[Mapping[str, Any]],
    *,
    epochs: int,
    shuffle: bool,
    seed: int,
    stratify: str | None = None,
) -> list[Mapping[str, Any]]:
    """Every prompt of every epoch in training order (each epoch its own permutation).

    With ``stratify`` (a payload field, e.g. ``"split"``) each value's prompts are spread
    evenly over the epoch, so every stretch of the schedule (a step's batch) holds the
    values in the dataset's proportions instead of whatever mix the shuffle dealt.

    :raises ConfigError: a prompt lacks the ``stratify`` field.
    """
    if stratify:
        check_stratify(payloads, stratify)
    order: list[Mapping[str, Any]] = []
    for epoch in range(epochs):
        items = list(payloads)
        if shuffle:
            random.Random(seed + epoch).shuffle(items)
        order.extend(_spread(items, stratify) if stratify else items)
    return order


def check_stratify(
    payloads: Sequence[Mapping[str, Any]], field: str, *, id_field: str = "id"
) -> None:
    """Raise a :class:`ConfigError` naming the first prompt without ``field``."""
    missing = [i for i, p in enumerate(payloads) if field not in p]
    if missing:
        first = missing[0]
        raise ConfigError(
            f"training.stratify = {field!r}, but {len(missing)} prompt(s) have no {field!r} "
            f"field (the first: prompt {first} of the dataset, {id_field} "
            f"{payloads[first].get(id_field)!r}); give every prompt one, or drop "
            "training.stratify",
            field="training.stratify",
        )


def _spread(items: list[Mapping[str, Any]], field: str) -> list[Mapping[str, Any]]:
    """``items`` reordered so each ``field`` value's j-th of n items sits at (j + ½)/n of
    the way through: every window holds each value in proportion (ties: first seen)."""
    strata: dict[Any, list[Mapping[str, Any]]] = {}
    for item in items:
        strata.setdefault(item[field], []).append(item)
    placed = [
        ((j + 0.5) / len(members), rank, j, item)
        for rank, members in enumerate(strata.values())
        for j, item in enumerate(members)
    ]
    placed.sort(key=lambda p: p[:3])
    return [item for *_, item in placed]


def planned_steps(config: RollhubConfig, prompts: int) -> int:
    """Steps a run trains: ``training.steps``, or every prompt of every epoch once."""
    tr = config.training
    total = math.ceil(prompts * tr.epochs / tr.batch_groups)
    return min(total, tr.steps) if tr.steps else total

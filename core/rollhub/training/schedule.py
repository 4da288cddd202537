"""The order a training run visits its prompts, and the episode seeds that order implies.

Prompts are laid out once as a schedule (``epochs`` passes, each shuffled by
:func:`rollhub.seeding.epoch_random`, optionally stratified so every batch holds a field's
values in proportion: ``training.stratify``); step ``s`` trains on schedule entries
``[s·B, (s+1)·B)``. Because the schedule is fixed, so are the seed rounds every step
uses (:func:`advance_rounds`): a checkpoint records them as they stand when the next
step begins, whatever sampling ahead had already drawn.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rollhub.errors import ConfigError
from rollhub.seeding import epoch_random

__all__ = ["advance_rounds", "check_stratify", "schedule"]


def schedule(
    payloads: Sequence[Mapping[str, Any]],
    *,
    epochs: int,
    shuffle: bool,
    seed: int,
    stratify: str | None = None,
    legacy_epochs: bool = False,
) -> list[Mapping[str, Any]]:
    """Every prompt of every epoch in training order (each epoch its own permutation).

    With ``stratify`` (a payload field, e.g. ``"split"``) each value's prompts are spread
    evenly over the epoch, so every stretch of the schedule (a step's batch) holds the
    values in the dataset's proportions instead of whatever mix the shuffle dealt.

    ``legacy_epochs`` shuffles epoch ``e`` with ``Random(seed + e)``, as runs checkpointed
    before :func:`~rollhub.seeding.epoch_random` did, so such a run resumes the order it
    started (epoch 0 is the same either way).

    :raises ConfigError: a prompt lacks the ``stratify`` field.
    """
    if stratify:
        check_stratify(payloads, stratify)
    order: list[Mapping[str, Any]] = []
    for epoch in range(epochs):
        items = list(payloads)
        if shuffle:
            rng = random.Random(seed + epoch) if legacy_epochs else epoch_random(seed, epoch)
            rng.shuffle(items)
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


def advance_rounds(
    rounds: Mapping[str, list[int]], group_ids: Iterable[str], n_samples: int
) -> dict[str, list[int]]:
    """``rounds`` (:meth:`rollhub.seeding.EpisodeSeeds.rounds`) after the hub ran
    ``n_samples`` samples of each prompt in ``group_ids`` once, in that order."""
    out = {gid: list(row) for gid, row in rounds.items()}
    for gid in group_ids:
        row = out.setdefault(gid, [])
        row.extend([-1] * (n_samples - len(row)))
        for index in range(n_samples):
            row[index] += 1
    return out

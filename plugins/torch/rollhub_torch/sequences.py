"""Episodes → what the torch trainer forwards: one prompt, many responses.

Every :class:`~rollhub.trace.TraceRecord` is ``prompt_ids + response_ids`` with a mask
that is 1 exactly on sampled tokens. The samples of a GRPO group (and every record of one
agent that starts from the same prompt) share ``prompt_ids`` token for token, so the
trainer forwards each distinct prompt once and its responses as a batch on top of the
prompt's key/value states: the gradient is the same as forwarding every record whole, at
a fraction of the compute when prompts are long and responses short.

Which records are trained, cut to a length budget or dropped is decided by the core
(:mod:`rollhub.training.fitting`); this module only groups the fitted records by prompt
and lays a group's responses out as padded tensors (:func:`response_tensors`). Nothing is
retokenised: the ids are the ones the sampler saw and produced.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollhub.episode import Episode
from rollhub.training.fitting import FitStats, fit_records

if TYPE_CHECKING:
    import torch

__all__ = [
    "PromptGroup", "Response", "SequenceStats", "prompt_groups", "response_parts",
    "response_tensors", "shared_prefix",
]

#: a prefix the prompts share is forwarded once a step when it is at least this long
MIN_SHARED = 32

#: what a part (one batch of responses forwarded together) costs beyond its padded tokens,
#: in tokens: a pass's launch of ~30 layers' operations forward and back, ~50 ms, is
#: about what 10-20 padded tokens cost on the main job's trainer
PART_COST = 16

#: what the conversion did; the core's statistics of fitting (records, tokens, cuts)
SequenceStats = FitStats


@dataclass(frozen=True)
class Response:
    """One record's tokens after its prompt, with the sampler's view of them."""

    token_ids: list[int]
    mask: list[int]  # 1: sampled by the model (trained); 0: tool result, template, user
    logprobs: list[float]  # the sampler's logprob where mask is 1, else 0.0
    advantage: float
    episode_id: str

    @property
    def trained_tokens(self) -> int:
        """Sampled tokens, the ones the loss sees."""
        return sum(self.mask)


@dataclass
class PromptGroup:
    """Responses that continue one prompt."""

    prompt_ids: tuple[int, ...]
    responses: list[Response] = field(default_factory=list)


def prompt_groups(
    pairs: Iterable[tuple[Episode, float]], *, max_length: int | None = None,
    skip_zero_advantage: bool = True,
) -> tuple[list[PromptGroup], FitStats]:
    """The fitted records of ``(episode, advantage)`` pairs grouped by their prompt
    (:func:`rollhub.training.fitting.fit_records` chooses and cuts them)."""
    fitted, stats = fit_records(
        pairs, max_length=max_length, skip_zero_advantage=skip_zero_advantage
    )
    groups: dict[tuple[int, ...], PromptGroup] = {}
    for f in fitted:
        key = tuple(f.prompt_ids)
        groups.setdefault(key, PromptGroup(key)).responses.append(Response(
            f.response_ids, f.response_mask, f.response_logprobs, f.advantage, f.episode_id
        ))
    return list(groups.values()), stats


def response_tensors(
    group: PromptGroup,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, trained, sampler logprobs, advantage)``, each ``[responses, width]``, the
    responses right-padded."""
    import torch

    rows = group.responses
    n, width = len(rows), max(len(r.token_ids) for r in rows)
    ids = torch.zeros((n, width), dtype=torch.long)
    trained = torch.zeros((n, width), dtype=torch.bool)
    sampler = torch.zeros((n, width))
    for j, r in enumerate(rows):
        k = len(r.token_ids)
        ids[j, :k] = torch.tensor(r.token_ids)
        trained[j, :k] = torch.tensor(r.mask, dtype=torch.bool)
        sampler[j, :k] = torch.tensor(r.logprobs)
    advantage = torch.tensor([r.advantage for r in rows]).unsqueeze(1).expand(n, width)
    return ids, trained, sampler, advantage


def response_parts(responses: Sequence[Response], max_rows: int) -> list[list[Response]]:
    """``responses`` as parts of at most ``max_rows`` forwarded together, shortest first.

    A part is padded to its longest response, so a 130-token response beside three of 10
    tokens costs four of 130. The responses are taken by length and cut where the padded
    tokens plus :data:`PART_COST` a part sum lowest (an exact search: a group has tens of
    responses). No part is larger than ``max_rows``, as before, so no part holds more
    activations than ``max_rows`` of the longest response would.
    """
    order = sorted(responses, key=lambda r: len(r.token_ids))
    n = len(order)
    # best[i]: cheapest cost of the first i responses; cut[i]: where its last part starts
    best, cut = [0] + [0] * n, [0] * (n + 1)
    for i in range(1, n + 1):
        width = len(order[i - 1].token_ids)  # the longest of any part ending at i
        best[i], cut[i] = min(
            (best[j] + (i - j) * width + PART_COST, j) for j in range(max(0, i - max_rows), i)
        )
    parts: list[list[Response]] = []
    i = n
    while i > 0:
        parts.append(order[cut[i] : i])
        i = cut[i]
    return parts[::-1]


def shared_prefix(prompts: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The tokens all of several ``prompts`` start with (a system prompt, the tools'
    schema), when there are at least :data:`MIN_SHARED`; else ``()``."""
    if len(prompts) < 2:
        return ()
    first, n = prompts[0], min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            n = i
            break
    return tuple(first[:n]) if n >= MIN_SHARED else ()

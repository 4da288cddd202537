"""Episodes → what the torch trainer forwards: one prompt, many responses.

Every :class:`~rollhub.trace.TraceRecord` is ``prompt_ids + response_ids`` with a mask
that is 1 exactly on sampled tokens. The samples of a GRPO group (and every record of one
agent that starts from the same prompt) share ``prompt_ids`` token for token, so the
trainer forwards each distinct prompt once and its responses as a batch on top of the
prompt's key/value states: the gradient is the same as forwarding every record whole, at
a fraction of the compute when prompts are long and responses short.

Nothing is retokenised: the ids are the ones the sampler saw and produced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rollhub.episode import Episode

__all__ = ["PromptGroup", "Response", "SequenceStats", "prompt_groups"]


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


@dataclass
class SequenceStats:
    """What the conversion did, for the step's metrics."""

    records: int = 0
    trained_tokens: int = 0
    masked_tokens: int = 0
    truncated_records: int = 0
    truncated_tokens: int = 0
    dropped_records: int = 0

    def as_metrics(self) -> dict[str, int]:
        """Flat numbers for metrics.jsonl."""
        return {
            "datums": self.records,
            "trained_tokens": self.trained_tokens,
            "masked_tokens": self.masked_tokens,
            "truncated_records": self.truncated_records,
            "truncated_tokens": self.truncated_tokens,
            "dropped_records": self.dropped_records,
        }


def prompt_groups(
    pairs: Iterable[tuple[Episode, float]], *, max_length: int | None = None,
    skip_zero_advantage: bool = True,
) -> tuple[list[PromptGroup], SequenceStats]:
    """Group the records of ``(episode, advantage)`` pairs by their prompt.

    ``skip_zero_advantage`` leaves out episodes whose advantage is 0 (no gradient under the
    RL losses). A record longer than ``max_length`` tokens is cut there and counted; one
    whose prompt alone reaches it is dropped and counted.
    """
    stats = SequenceStats()
    groups: dict[tuple[int, ...], PromptGroup] = {}
    for episode, advantage in pairs:
        if skip_zero_advantage and advantage == 0.0:
            continue
        for record in episode.traces:
            ids, mask = list(record.response_ids), list(record.response_mask)
            logprobs = [float(x) for x in record.response_logprobs]
            if max_length is not None and len(record.prompt_ids) + len(ids) > max_length:
                keep = max_length - len(record.prompt_ids)
                if keep <= 0:
                    stats.dropped_records += 1
                    continue
                stats.truncated_records += 1
                stats.truncated_tokens += len(ids) - keep
                ids, mask, logprobs = ids[:keep], mask[:keep], logprobs[:keep]
            if not any(mask):
                continue
            response = Response(ids, mask, logprobs, float(advantage), episode.episode_id)
            key = tuple(record.prompt_ids)
            groups.setdefault(key, PromptGroup(key)).responses.append(response)
            stats.records += 1
            stats.trained_tokens += response.trained_tokens
            stats.masked_tokens += len(mask) - response.trained_tokens
    return list(groups.values()), stats

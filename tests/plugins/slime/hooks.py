"""slime hooks the rollout tests name by import path, written to slime's signatures."""

from __future__ import annotations

from typing import Any

#: what the all-samples hook was given, per call
SEEN: list[list[list[Any]]] = []


def _flat(group: list[Any]) -> list[Any]:
    return [s for item in group for s in (item if isinstance(item, list) else [item])]


def keep_correct(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """``--dynamic-sampling-filter-path``: keep groups whose every rollout earned 1."""
    from slime.rollout.filter_hub.base_types import DynamicFilterOutput

    keep = all(s.reward == 1.0 for s in _flat(samples))
    return DynamicFilterOutput(keep=keep, reason=None if keep else "wrong")


def keep_correct_with_fallback(args: Any, samples: list[Any], **kwargs: Any) -> Any:
    """As :func:`keep_correct`, but kept rather than sampling another round."""
    output = keep_correct(args, samples, **kwargs)
    output.keep_when_insufficient = True
    return output


def keep_all_legacy(args: Any, samples: list[Any], **kwargs: Any) -> bool:
    """A filter in slime's legacy form: a bare bool."""
    return True


def remove_second(args: Any, data: list[list[Any]]) -> None:
    """``--rollout-sample-filter-path``: take the second sample of each group out of the loss."""
    for group in data:
        _flat(group)[1].remove_sample = True


def remember_all(args: Any, all_samples: list[list[Any]], data_source: Any) -> None:
    """``--rollout-all-samples-process-path``: note every finished group."""
    SEEN.append(all_samples)

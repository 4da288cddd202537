"""What rollhub reads and writes on slime's objects (slime itself is not imported here).

slime hands rollhub its parsed arguments (an :class:`argparse.Namespace`), its prompt
``Sample`` objects, its data source and its eval dataset configs; these protocols name the
attributes rollhub touches, so the adapters type-check without slime installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, ClassVar, Protocol, TypeVar

__all__ = ["DataSource", "EvalDataset", "Sample", "SampleGroup", "SampleT"]


class Sample(Protocol):
    """slime's ``Sample`` (``slime.utils.types``): the fields rollhub reads or fills."""

    #: slime's ``Sample.Status`` enum (COMPLETED, TRUNCATED, ABORTED, FAILED, ...)
    Status: ClassVar[type[Enum]]

    index: int | None
    group_index: int | None
    prompt: str | list[dict[str, Any]]
    label: object
    metadata: dict[str, Any]
    response: str
    response_length: int
    tokens: list[int]
    loss_mask: list[int] | None
    rollout_log_probs: list[float] | None
    weight_versions: list[str]
    reward: float | dict[str, Any] | None
    status: Enum
    rollout_id: int | None
    session_id: str | None
    remove_sample: bool


SampleT = TypeVar("SampleT", bound=Sample)

#: one prompt group as slime's loop holds it: ``list[Sample]``, or one list per rollout
#: when a rollout forked into several samples
SampleGroup = Sequence[Sample] | Sequence[Sequence[Sample]]


class DataSource(Protocol):
    """slime's rollout data source."""

    def get_samples(self, num_samples: int) -> list[list[Sample]]:
        """The next ``num_samples`` prompt groups (empty when the data is exhausted)."""
        ...


class EvalDataset(Protocol):
    """slime's ``EvalDatasetConfig``: the fields rollhub reads directly (others by name)."""

    @property
    def name(self) -> str:
        """The dataset's name."""
        ...

    @property
    def path(self) -> str:
        """The dataset's file (JSONL or Parquet, optionally ``@[start:end]``)."""
        ...

    @property
    def n_samples_per_eval_prompt(self) -> int | None:
        """Samples per prompt (None: slime's argument)."""
        ...

    @property
    def input_key(self) -> str | None:
        """The prompt's column (None: slime's argument)."""
        ...

    @property
    def label_key(self) -> str | None:
        """The label's column (None: slime's argument)."""
        ...

    @property
    def metadata_key(self) -> str | None:
        """The metadata's column (None: slime's argument)."""
        ...

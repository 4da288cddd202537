"""The trainer interface: what a backend plugin does with finished episode groups."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from rollhub.episode import EpisodeGroup

__all__ = ["Trainer", "TrainerOptions"]


class TrainerOptions(BaseModel):
    """Options every trainer accepts; trainers subclass this for their own."""

    model_config = ConfigDict(extra="forbid")


class Trainer(ABC):
    """Consumes episode groups as they complete. Subclasses set ``name`` and ``Options``."""

    name: ClassVar[str]
    Options: ClassVar[type[TrainerOptions]] = TrainerOptions

    def __init__(self, options: TrainerOptions | None = None, *, run_dir: Path | None = None,
                 **_: Any) -> None:
        self.options = options or self.Options()
        self.run_dir = run_dir

    async def start(self) -> None:  # noqa: B027 - optional lifecycle step
        """Prepare outputs or connect to the training service."""

    @abstractmethod
    async def consume(self, group: EpisodeGroup) -> dict[str, Any] | None:
        """Take one finished group; return metrics (or None)."""

    async def close(self) -> dict[str, Any]:
        """Flush outputs; return what was written or trained (paths, step counts)."""
        return {}

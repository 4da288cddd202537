"""The ``verl`` trainer component: where the verl backend's settings live.

verl drives its own training loop: ``rollhub verl rollhub.toml`` starts verl's PPO entry
point with the rollhub agent loop selected, and each verl agent-loop worker runs dataset
rows as episodes on its own hub (:mod:`rollhub_verl.agent_loop`). ``[trainer] name =
"verl"`` selects this component (a :class:`~rollhub.training.LaunchedBackend`) so that
``rollhub config check`` validates the options below; ``rollhub run`` refuses it and says
where to go.

Example ``rollhub.toml``::

    [trainer]
    name = "verl"
    reward_source = "rollhub"         # the agent's rewards; "verl": verl's reward function

    [trainer.overrides]               # Hydra overrides of verl's ppo_trainer config
    "algorithm.adv_estimator" = "grpo"
    "data.train_files" = "data/train.parquet"
    "actor_rollout_ref.model.path" = "Qwen/Qwen2.5-0.5B-Instruct"
    "actor_rollout_ref.rollout.n" = 4
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from rollhub.errors import UsageError
from rollhub.registry import ComponentContext
from rollhub.training import LaunchedBackend, TrainerOptions

log = logging.getLogger(__name__)

__all__ = ["VerlOptions", "VerlTrainer", "flatten_overrides", "inside_agent_loop"]

#: set while a verl agent-loop worker starts its hub (then the component is not misused)
_IN_AGENT_LOOP: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rollhub_verl_in_agent_loop", default=False
)

RUN_HINT = (
    "[trainer] name = 'verl': verl drives the training loop, so start it with "
    "'rollhub verl {config}' (verl's PPO entry point with the rollhub agent loop), "
    "not 'rollhub run'"
)


class VerlOptions(TrainerOptions):
    """How ``rollhub verl`` launches verl and how rows and episodes cross over."""

    overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Hydra overrides of verl's config: dotted keys, or nested tables",
    )
    args: list[str] = Field(
        default_factory=list,
        description="raw Hydra override strings appended as given (e.g. '+ray_kwargs.x=1')",
    )
    agent_name: str = Field("rollhub", description="name of the agent loop in verl's registry")
    messages_field: str = Field(
        "messages", description="payload key that receives the row's raw_prompt messages"
    )
    reward_source: Literal["rollhub", "verl"] = Field(
        "rollhub",
        description="rollhub: the episode's reward is reward_score; verl: verl's reward "
        "function scores the responses",
    )
    entry_point: str = Field(
        "verl.trainer.main_ppo", description="module run with python -m to start training"
    )

    @field_validator("overrides")
    @classmethod
    def _flat(cls, value: dict[str, Any]) -> dict[str, Any]:
        return flatten_overrides(value)


class VerlTrainer(LaunchedBackend):
    """Holds the verl options; verl's own loop consumes the episodes.

    :raises UsageError: built outside a verl agent-loop worker (a hub started by hand).
    """

    name = "verl"
    launch_hint = RUN_HINT.format(config="rollhub.toml")
    Options = VerlOptions
    options: VerlOptions
    policies_refusal = (
        "verl's PPO loop trains one actor model with one optimizer and samples it from one "
        "rollout server group; the turns of a second policy would be trained into that actor"
    )

    def __init__(
        self, options: VerlOptions | None = None, *, context: ComponentContext | None = None,
        run_dir: Path | None = None, exp_id: str | None = None, **kwargs: object,
    ) -> None:
        # refused when built, before a hub started outside verl's agent loop (by hand, or
        # by a command other than 'rollhub run', which refuses the role itself) starts its
        # gateway and runtime workers
        if not _IN_AGENT_LOOP.get():
            raise UsageError(self.launch_hint)
        super().__init__(options, context=context, run_dir=run_dir, exp_id=exp_id, **kwargs)


@contextmanager
def inside_agent_loop() -> Iterator[None]:
    """Mark the current context as a verl agent-loop worker starting its hub."""
    token = _IN_AGENT_LOOP.set(True)
    try:
        yield
    finally:
        _IN_AGENT_LOOP.reset(token)


def flatten_overrides(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c.d": 2}`` → ``{"a.b": 1, "c.d": 2}`` (tables become dotted keys)."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        dotted = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            out.update(flatten_overrides(item, dotted + "."))
        else:
            out[dotted] = item
    return out

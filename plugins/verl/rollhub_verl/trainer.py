"""The ``verl`` trainer component: selects the verl backend, which drives its own loop.

verl drives its own training loop: ``rollhub verl rollhub.toml`` starts verl's PPO entry
point with the rollhub agent loop selected, and each verl agent-loop worker runs dataset
rows as episodes on its own hub (:mod:`rollhub_verl.agent_loop`). ``[trainer] name =
"verl"`` selects this component (a :class:`~rollhub.training.LaunchedBackend`); how verl is
launched lives in ``[plugins.verl]`` (:mod:`rollhub_verl.settings`). ``rollhub run``
refuses it and says where to go.

Its ``Options`` are the same keys, so the older spelling (them under ``[trainer]``) still
validates; :func:`rollhub_verl.settings.verl_settings` reads either spelling.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rollhub.errors import UsageError
from rollhub.registry import ComponentContext
from rollhub.training import LaunchedBackend

from rollhub_verl.settings import VerlOptions

log = logging.getLogger(__name__)

__all__ = ["VerlTrainer", "inside_agent_loop"]

#: set while a verl agent-loop worker starts its hub (then the component is not misused)
_IN_AGENT_LOOP: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rollhub_verl_in_agent_loop", default=False
)

RUN_HINT = (
    "[trainer] name = 'verl': verl drives the training loop, so start it with "
    "'rollhub verl {config}' (verl's PPO entry point with the rollhub agent loop), "
    "not 'rollhub run'"
)


class VerlTrainer(LaunchedBackend):
    """Selects verl, whose own loop consumes the episodes; its settings are ``[plugins.verl]``.

    :raises UsageError: built outside a verl agent-loop worker (a hub started by hand).
    """

    name = "verl"
    launch_hint = RUN_HINT.format(config="rollhub.toml")
    # the same keys as [plugins.verl], so their older spelling under [trainer] validates
    Options = VerlOptions
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

"""The rollhub agent loop for verl: each dataset row runs as one episode on the worker's hub.

verl's ``AgentLoopWorker`` builds this class per row with ``hydra.utils.instantiate`` (the
registry entry, or the YAML entry of ``agent.agent_loop_config_path`` that ``rollhub verl``
writes) and awaits ``run(sampling_params, **row)``. The loop:

1. starts this process's hub on first use (:mod:`rollhub_verl.worker_hub`), with the
   gateway sampling from verl's servers through this worker's ``server_manager``;
2. records verl's step (``global_steps``) as the hub's weight version;
3. turns the row into the agent's payload (``raw_prompt`` → ``messages``; JSON columns as
   they are; tensors and verl's internal columns left out) and runs one episode, with verl's
   sampling parameters bound to its session;
4. returns the episode as ``AgentLoopOutput``\\ s (:mod:`rollhub_verl.outputs`): a list
   under verl's v1 trainer (``trainer.use_v1``), one output under v0.

Failed episodes follow ``[rewards] on_failure`` applied to the episode on its own (its
siblings run in other calls): ``exclude_episode`` and ``drop_group`` leave it out (v1) or
make it a no-gradient placeholder (v0); ``zero_reward`` keeps it at reward 0.0.
Under v0 that placeholder's 0.0 still enters verl's GRPO baseline of its group, which
verl cannot leave a row out of: the first v0 run with another policy than ``zero_reward``
warns (:func:`rollhub_verl.outputs.warn_v0_baseline`).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from rollhub.episode import Episode, EpisodeGroup
from rollhub.errors import ConfigError
from rollhub.scoring.rewards import apply_failure_policy
from verl.experimental.agent_loop import agent_loop as verl_agent_loop
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from rollhub_verl.outputs import (
    Budget,
    episode_parts,
    to_agent_loop_outputs,
    warn_v0_baseline,
)
from rollhub_verl.settings import verl_settings
from rollhub_verl.verl_types import VerlConfig
from rollhub_verl.worker_hub import hub_for, verl_sampling

log = logging.getLogger(__name__)

__all__ = ["AGENT_NAME", "RollhubAgentLoop", "row_payload", "sample_index"]

AGENT_NAME = "rollhub"

#: row columns that are verl's bookkeeping, not the agent's task
INTERNAL_COLUMNS = frozenset(
    {"raw_prompt", "global_steps", "session_id", "agent_name", "priority", "uid", "validate"}
)


def sample_index(row: Mapping[str, object]) -> int:
    """The row's sample index, which (with its prompt) picks its sampling seed.

    v1 numbers a prompt's sessions (``session_id``, in ``[0, n)``). A v0 row has no such
    number; verl numbers the whole batch (``priority``) before cutting it into one chunk
    per agent-loop worker, each a process with a hub of its own, so a prompt's copies may
    be split between two hubs that each count them from 0. The batch number keeps those
    copies on their own seeds (the index of a v0 episode is that number, not 0..n-1).
    """
    session = _as_int(row.get("session_id"))
    if session is not None:
        return session
    number = _as_int(row.get("priority"))
    return number if number is not None and number >= 0 else 0


class RollhubAgentLoop(AgentLoopBase):
    """Runs a verl row as a rollhub episode (see the module docstring).

    :param rollhub_config: path of ``rollhub.toml`` (default: ``$ROLLHUB_CONFIG``).
    """

    def __init__(self, *args: object, rollhub_config: str | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        path = rollhub_config or os.environ.get("ROLLHUB_CONFIG")
        if not path:
            raise ConfigError(
                "the rollhub agent loop needs its rollhub.toml: give rollhub_config in the "
                "agent loop entry (rollhub verl writes it) or set ROLLHUB_CONFIG",
                field="rollhub_config",
            )
        self.rollhub_config = str(path)
        self.budget = Budget(
            prompt_length=int(self.rollout_config.prompt_length),
            response_length=int(self.rollout_config.response_length),
        )

    async def run(
        self, sampling_params: dict[str, Any], **kwargs: object
    ) -> AgentLoopOutput | list[AgentLoopOutput]:
        """Run the row as one episode; see the module docstring for what is returned."""
        hub = await hub_for(
            self.rollhub_config,
            server=self.server_manager,
            budget=self.budget,
            model_dir=lambda: _model_dir(self.config),
        )
        options = verl_settings(hub.config)
        step = _as_int(kwargs.get("global_steps"))
        if step is not None and step >= 0 and (hub.weight_version or -1) < step:
            hub.set_weight_version(step)
        payload = row_payload(kwargs, messages_field=options.messages_field)
        group_id = str(
            _plain(kwargs.get("uid")) or payload.get("id") or _plain(kwargs.get("index"))
        )
        index = sample_index(kwargs)
        bound = dict(sampling_params)
        priority = _as_int(kwargs.get("priority"))
        if priority:
            bound["priority"] = priority
        with verl_sampling(bound):
            episode = await hub.run_episode(payload, group_id, index)
        if not (episode.ok and episode.reward is None and options.reward_source == "verl"):
            apply_failure_policy(
                EpisodeGroup(group_id, payload, [episode]), hub.config.rewards.on_failure
            )
        collation: Literal["v1", "v0"] = "v1" if self.config.trainer.get("use_v1", True) else "v0"
        warn_v0_baseline(collation, hub.config.rewards.on_failure)
        parts = episode_parts(
            episode,
            self.budget,
            collation=collation,
            reward_source=options.reward_source,
            fallback_prompt_ids=await self._fallback_prompt_ids(episode, kwargs),
            eos_token_id=_eos_id(self.tokenizer),
        )
        outputs = to_agent_loop_outputs(
            parts, with_logprobs=bool(sampling_params.get("logprobs", True))
        )
        log.debug("episode %s: %s, %d output(s)", episode.episode_id, episode.status, len(outputs))
        if collation == "v1":
            return outputs
        return outputs[0]

    async def _fallback_prompt_ids(self, episode: Episode, row: Mapping[str, object]) -> list[int]:
        """A placeholder's prompt: the episode's first prompt, else the row's as verl
        tokenises it (an episode without traces made no model call)."""
        if episode.traces:
            return list(episode.traces[0].prompt_ids)
        messages = _plain(row.get("raw_prompt")) or []
        try:
            if not isinstance(messages, Iterable):
                raise TypeError(f"raw_prompt is a {type(messages).__name__}")
            return await self.ct_build_initial_tokens(list(messages))
        except Exception as exc:  # a placeholder still needs a prompt; never fail the batch
            log.warning("could not tokenise the row's prompt for a placeholder: %s", exc)
            return [_eos_id(self.tokenizer)]


def row_payload(row: Mapping[str, object], *, messages_field: str = "messages") -> dict[str, Any]:
    """The agent's payload for a verl row (JSON values only; see the module docstring)."""
    payload: dict[str, Any] = {}
    for key, value in row.items():
        if key in INTERNAL_COLUMNS or key.startswith("__"):
            continue
        plain = _plain(value)
        if plain is not _SKIP:
            payload[key] = plain
    messages = _plain(row.get("raw_prompt"))
    if messages is not _SKIP and messages is not None:
        payload[messages_field] = messages
    uid = _plain(row.get("uid"))
    if "id" not in payload and uid not in (None, _SKIP):
        payload["id"] = str(uid)
    return payload


_SKIP: Final = object()


def _plain(value: object) -> object:
    """JSON-ready ``value``; :data:`_SKIP` for tensors and other non-data."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value if not isinstance(value, float) or math.isfinite(value) else None
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, np.ndarray):
        if value.dtype != object and value.ndim > 0 and value.size > 4096:
            return _SKIP
        return _plain(value.tolist())
    if isinstance(value, dict):
        out = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _SKIP}
    if isinstance(value, list | tuple):
        items = [_plain(v) for v in value]
        return [v for v in items if v is not _SKIP]
    return _SKIP


def _as_int(value: object) -> int | None:
    plain = _plain(value)
    if isinstance(plain, bool) or not isinstance(plain, int | float):
        return None
    return int(plain)


def _eos_id(tokenizer: object) -> int:
    for attr in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return 0


def _model_dir(config: VerlConfig) -> str | None:
    """verl's model as a local directory, for the gateway's tokenizer and chat template."""
    model = config.actor_rollout_ref.model
    path = str(model.get("tokenizer_path") or model.path)
    if Path(path).expanduser().is_dir():
        return str(Path(path).expanduser())
    try:  # a hub id verl has already downloaded in this process's cache
        from huggingface_hub import snapshot_download

        return snapshot_download(path, local_files_only=True)
    except Exception:
        return None


def _register() -> None:
    """Add the loop to verl's registry under :data:`AGENT_NAME`, unless an entry is there.

    verl's ``@register`` would replace an entry loaded from ``agent_loop_config_path``
    (which carries ``rollhub_config``) when this module is imported after it, as it is in
    every worker: the first instantiation imports it.
    """
    target = f"{RollhubAgentLoop.__module__}.{RollhubAgentLoop.__qualname__}"
    verl_agent_loop._agent_loop_registry.setdefault(AGENT_NAME, {"_target_": target})


_register()

"""rollhub episodes in rLLM's episode shape (``Episode.to_dict()`` of the pinned commit).

One rollhub :class:`~rollhub.episode.Episode` becomes one rLLM episode dict, the shape
rLLM's ``Episode.from_dict`` reads back: id ``"{task_id}:{rollout_idx}"`` (the group id and
the sample index), the termination reason, ``is_correct`` (reward >= 1.0, as rLLM's remote
engine decides it) and one trajectory named ``default`` carrying the episode's reward, with
one step per model call: its exact prompt ids, sampled ids and logprobs
(:meth:`rollhub.trace.TraceRecord.calls`), as rLLM builds steps from gateway traces.
"""

from __future__ import annotations

from typing import Any

from rollhub.episode import Episode
from rollhub.trace import TurnCall

from rollhub_rllm.protocol import termination_value

__all__ = ["episode_to_rllm"]


def _step(call: TurnCall, last: bool) -> dict[str, Any]:
    return {
        "prompt_ids": call.prompt_ids,
        "response_ids": call.completion_ids,
        "logprobs": call.logprobs,
        "routing_matrices": None,
        "chat_completions": [],
        "observation": None,
        "thought": "",
        "action": None,
        "model_response": "",
        "model_output": None,
        "info": {"finish_reason": call.finish_reason, "turn_index": call.turn_index},
        "reward": 0.0,
        "done": last,
        "mc_return": 0.0,
        "advantage": None,
        "weight_version": call.weight_version,
    }


def episode_to_rllm(episode: Episode) -> dict[str, Any]:
    """The rLLM episode dict of a finished rollhub episode (failed ones too, marked)."""
    calls = sorted((c for r in episode.traces for c in r.calls()), key=lambda c: c.turn_index)
    steps = [_step(c, i == len(calls) - 1) for i, c in enumerate(calls)]
    trajectories = []
    if steps or episode.reward is not None:
        trajectories.append(
            {
                "uid": episode.episode_id,
                "name": "default",
                "task": episode.payload,
                "steps": steps,
                "reward": episode.reward,
                "info": {},
            }
        )
    info: dict[str, Any] = {
        "rollhub_status": episode.status,
        "trainable": episode.trainable,
        "weight_version": episode.weight_version,
        "reward_components": dict(episode.reward_components),
    }
    if episode.error is not None:
        info["error"] = episode.error.to_dict()
    metrics = {k: v for k, v in episode.metrics.items() if isinstance(v, int | float)}
    metrics.update(steps_collected=len(steps), empty=int(not steps))
    return {
        "id": f"{episode.group_id}:{episode.sample_index}",
        "task": episode.payload,
        "termination_reason": termination_value(episode.status, episode.result),
        "is_correct": bool(episode.reward is not None and episode.reward >= 1.0),
        "session_id": episode.session_id,
        "trajectories": trajectories,
        "metrics": metrics,
        "info": info,
    }

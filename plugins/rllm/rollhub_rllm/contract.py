"""What rollhub-rllm relies on in rLLM and rllm-model-gateway, kept as data.

The facts below were read from ``rllm-org/rllm`` at :data:`RLLM_COMMIT`
(``rllm/engine/remote_runtime/protocol.py``, ``rllm/workflows/workflow.py``,
``rllm/engine/remote_agent_flow_engine.py``, ``rllm/types.py``) and from the PyPI release
``rllm-model-gateway`` :data:`GATEWAY_VERSION`. What the tests check:

- the mirror types of :mod:`rollhub_rllm.protocol`, the remote runtime's methods and the
  episode export against this record, on every run;
- :data:`GATEWAY_TRACE_FIELDS` and :data:`GATEWAY_VERSION` against the installed
  ``rllm-model-gateway``, on every run;
- the rest of the record against rLLM's own classes only where ``rllm`` is importable.
  rLLM is not on PyPI, so a plain test environment skips that check; run it with an rLLM
  checkout of :data:`RLLM_COMMIT` on ``PYTHONPATH``.
"""

from __future__ import annotations

__all__ = [
    "EPISODE_KEYS",
    "GATEWAY_TRACE_FIELDS",
    "GATEWAY_VERSION",
    "REMOTE_RUNTIME_METHODS",
    "REMOTE_TASK_RESULT_FIELDS",
    "RLLM_COMMIT",
    "STEP_KEYS",
    "TASK_SUBMISSION_FIELDS",
    "TERMINATION_REASONS",
    "TRAJECTORY_KEYS",
]

#: the rLLM commit these facts were read at (2026-08-15)
RLLM_COMMIT = "9beb6e0f676a46d38858991fd79ac5f8e0b16d4c"

#: the rllm-model-gateway release whose routes and trace fields are used
GATEWAY_VERSION = "0.1.0"

#: ``TaskSubmission`` (a dataclass): field name → annotation, in declaration order
TASK_SUBMISSION_FIELDS: dict[str, str] = {
    "task": "dict",
    "session_id": "str",
    "task_id": "str",
    "inference_url": "str",
}

#: ``RemoteTaskResult`` (a dataclass): field name → (annotation, default or "<required>")
REMOTE_TASK_RESULT_FIELDS: dict[str, tuple[str, str]] = {
    "finished": ("bool", "<required>"),
    "session_id": ("str", "<required>"),
    "task_id": ("str", "''"),
    "reward": ("float | None", "None"),
    "error": ("str | None", "None"),
    "termination_reason": ("TerminationReason | None", "None"),
    "elapsed": ("float", "0.0"),
    "raw_result": ("dict[str, Any] | None", "None"),
    "metadata": ("dict[str, Any]", "{}"),
}

#: ``TerminationReason`` (an Enum): member name → value
TERMINATION_REASONS: dict[str, str] = {
    "MAX_PROMPT_LENGTH_EXCEEDED": "max_prompt_length_exceeded",
    "MAX_RESPONSE_LENGTH_EXCEEDED": "max_response_length_exceeded",
    "ENV_DONE": "env_done",
    "MAX_TURNS_EXCEEDED": "max_turns_exceeded",
    "TIMEOUT": "timeout",
    "UNKNOWN": "unknown",
    "ERROR": "error",
}

#: ``RemoteAgentRuntime`` (a typing.Protocol): method → (is async, parameters after self)
REMOTE_RUNTIME_METHODS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "initialize": (False, ()),
    "execute_tasks": (True, ("submissions", "timeout")),
    "shutdown": (False, ()),
}

#: fields of one trace as ``GET /sessions/{sid}/traces`` returns it (rllm-model-gateway 0.1.0)
GATEWAY_TRACE_FIELDS: tuple[str, ...] = (
    "trace_id",
    "session_id",
    "model",
    "messages",
    "prompt_token_ids",
    "response_message",
    "completion_token_ids",
    "logprobs",
    "finish_reason",
    "latency_ms",
    "token_counts",
    "timestamp",
    "metadata",
    "raw_request",
    "raw_response",
)

#: keys of ``Episode.to_dict()`` (``rllm/types.py``), read back by ``Episode.from_dict``
EPISODE_KEYS: tuple[str, ...] = (
    "id", "task", "termination_reason", "is_correct", "session_id", "trajectories",
    "metrics", "info",
)  # fmt: skip

#: keys of ``Trajectory.to_dict()``
TRAJECTORY_KEYS: tuple[str, ...] = ("uid", "name", "task", "steps", "reward", "info")

#: keys of ``Step.to_dict()``
STEP_KEYS: tuple[str, ...] = (
    "prompt_ids", "response_ids", "logprobs", "routing_matrices", "chat_completions",
    "observation", "thought", "action", "model_response", "model_output", "info", "reward",
    "done", "mc_return", "advantage", "weight_version",
)  # fmt: skip

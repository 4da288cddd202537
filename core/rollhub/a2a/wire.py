"""What a rollout looks like on A2A: one task, two messages, one ``rollout`` artifact.

The first ``message/send`` (no task id) sets the rollout up and parks its task at
``input-required``; the second, on the same task id, runs it to ``completed`` with the
result in an artifact named ``rollout`` (or to ``failed`` with the reason as text). Both
messages carry the task in one data part as ``{"task_input": {...}}``, and the artifact
carries ``{"task_output", "reward", "metrics", "exception"}``: the conventions of
agentcore-rl-toolkit's A2A sessions, so either side talks to the other's.

A data part is a protobuf ``Struct``, whose only number type is a double: ``7`` arrives as
``7.0`` and integers above 2**53 lose digits. rollhub therefore also sends the exact JSON
text beside it (``task_input_json``, ``rollhub_dump``) and reads that first; peers that
do not know the extra key ignore it.

A task parked after its setup carries the rollout's ``_rollout.deadline_at`` (when its
setup message had one) in its metadata as ``rollhub_deadline_at``: past it the client has
given up, so the server may let the task go (:mod:`rollhub.a2a.taskstore`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from a2a.types import Artifact, Message, Part, Role, Task
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value

from rollhub.app.memory import payload_digest
from rollhub.episode import ErrorInfo
from rollhub.rollout import ROLLOUT_KEY
from rollhub.sessions.base import SessionDump, check_reward, numeric_metrics

__all__ = [
    "ARTIFACT_NAME",
    "INSTANCE_ENV",
    "INSTANCE_HEADER",
    "PARKED_DEADLINE_KEY",
    "SETUP_DIGEST_KEY",
    "TASK_INPUT_KEY",
    "WireError",
    "data_part",
    "dump_from_artifacts",
    "dump_to_data",
    "part_data",
    "read_task_input",
    "rollout_deadline",
    "setup_digest",
    "task_message",
    "task_metadata",
    "text_of",
]

TASK_INPUT_KEY = "task_input"
#: the exact JSON text of the task input, beside the Struct copy
TASK_INPUT_JSON_KEY = "task_input_json"
#: the exact JSON text of rollhub's dump, beside upstream's fields
DUMP_JSON_KEY = "rollhub_dump"
ARTIFACT_NAME = "rollout"
#: task metadata of a parked task: the rollout's deadline (epoch seconds)
PARKED_DEADLINE_KEY = "rollhub_deadline_at"
#: task metadata from its setup on: a digest of the setup's task input (hex)
SETUP_DIGEST_KEY = "rollhub_setup_digest"
#: set by a transport that starts the server: ``/ping`` echoes it in ``INSTANCE_HEADER``,
#: so the transport knows the answer came from the server it started, not from another
#: that had bound the port first
INSTANCE_ENV = "ROLLHUB_A2A_INSTANCE"
INSTANCE_HEADER = "X-Rollhub-Instance"


class WireError(ValueError):
    """A message or artifact that breaks the rollout convention (a contract fault, not a
    failed rollout)."""


def data_part(data: Mapping[str, Any]) -> Part:
    """A ``Part`` carrying ``data`` as a protobuf ``Struct``."""
    value = Value()
    value.struct_value.update(dict(data))
    return Part(data=value)


def part_data(part: Part) -> dict[str, Any] | None:
    """The dict in a data part, None for other parts."""
    if part.WhichOneof("content") != "data":
        return None
    data = json_format.MessageToDict(part.data)
    return data if isinstance(data, dict) else None


def exact_json(value: object) -> str:
    """``value`` as strict JSON (NaN and infinities refused: JSON has none)."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def task_message(
    task_input: Mapping[str, Any],
    *,
    message_id: str,
    context_id: str | None = None,
    task_id: str | None = None,
) -> Message:
    """A user message carrying ``task_input`` (Struct copy plus exact JSON)."""
    kwargs: dict[str, Any] = {
        "message_id": message_id,
        "role": Role.ROLE_USER,
        "parts": [
            data_part(
                {TASK_INPUT_KEY: dict(task_input), TASK_INPUT_JSON_KEY: exact_json(task_input)}
            )
        ],
    }
    if context_id is not None:
        kwargs["context_id"] = context_id
    if task_id is not None:
        kwargs["task_id"] = task_id
    return Message(**kwargs)


def read_task_input(message: Message | None) -> dict[str, Any]:
    """The task input of a message: the exact JSON when sent, else the Struct copy.

    :raises WireError: no data part, or none with a ``task_input`` object.
    """
    for part in message.parts if message is not None else ():
        data = part_data(part)
        if data is None:
            continue
        exact = data.get(TASK_INPUT_JSON_KEY)
        if isinstance(exact, str):
            try:
                value = json.loads(exact)
            except ValueError as exc:
                raise WireError(f"{TASK_INPUT_JSON_KEY} is not JSON: {exc}") from None
        elif TASK_INPUT_KEY in data:
            value = data[TASK_INPUT_KEY]
        else:
            raise WireError(f"the message's data part has no {TASK_INPUT_KEY!r} key: {list(data)}")
        if not isinstance(value, dict):
            raise WireError(f"{TASK_INPUT_KEY} must be an object, got {type(value).__name__}")
        return value
    raise WireError(f"the message carries no data part with a {TASK_INPUT_KEY!r} object")


def setup_digest(message: Message | None) -> str | None:
    """A digest (hex) of a setup message's task input that tells two inputs apart whatever
    their key order; None when the message breaks the convention (its setup fails anyway)
    or the input is not plain JSON."""
    try:
        digest = payload_digest(read_task_input(message))
    except WireError:
        return None
    return None if digest is None else digest.hex()


def task_metadata(task: Task) -> dict[str, Any]:
    """A task's metadata as a plain dict (empty when it has none)."""
    return json_format.MessageToDict(task.metadata) if task.HasField("metadata") else {}


def rollout_deadline(task_input: Mapping[str, Any]) -> float | None:
    """The ``_rollout.deadline_at`` of a task input (epoch seconds), None when it has none
    or it is not a finite number."""
    rollout = task_input.get(ROLLOUT_KEY)
    deadline = rollout.get("deadline_at") if isinstance(rollout, Mapping) else None
    if isinstance(deadline, bool) or not isinstance(deadline, int | float):
        return None
    return float(deadline) if math.isfinite(deadline) else None


def dump_to_data(dump: SessionDump) -> dict[str, Any]:
    """The artifact data of a dump: upstream's fields plus rollhub's exact JSON."""
    exception = None
    if dump.error is not None:
        exception = dump.error.traceback
        if exception is None:
            exception = f"{dump.error.type}: {dump.error.message}"
    exact = {
        "result": dump.result,
        "reward": dump.reward,
        "metrics": dump.metrics,
        "error": dump.error.to_dict() if dump.error is not None else None,
    }
    return {
        "task_output": dump.result,
        "reward": dump.reward,
        "metrics": dict(dump.metrics),
        "exception": exception,
        DUMP_JSON_KEY: exact_json(exact),
    }


def dump_from_artifacts(artifacts: Iterable[Artifact]) -> SessionDump | None:
    """The dump in the ``rollout`` artifact, None when there is none.

    Dumps of rollhub servers are read exactly; others from upstream's fields. A reward
    that is not a finite number becomes the rollout's error.
    """
    for artifact in artifacts:
        if artifact.name != ARTIFACT_NAME:
            continue
        for part in artifact.parts:
            data = part_data(part)
            if data is not None:
                return _dump_from_data(data)
    return None


def _dump_from_data(data: dict[str, Any]) -> SessionDump:
    exact = data.get(DUMP_JSON_KEY)
    if isinstance(exact, str):  # a rollhub server: every field as it was sent
        body = json.loads(exact)
        error = body.get("error")
        try:
            reward = check_reward(body.get("reward"), "reward")
        except ValueError as exc:
            return SessionDump.failed("InvalidResultError", str(exc))
        return SessionDump(
            result=body.get("result"),
            reward=reward,
            metrics=numeric_metrics(body.get("metrics")),
            error=ErrorInfo(error["type"], error["message"], error.get("traceback"))
            if error
            else None,
        )
    raw = data.get("reward")
    if raw in ("NaN", "Infinity", "-Infinity"):  # how a Struct shows a non-finite double
        raw = float(raw)
    try:
        reward = check_reward(raw, "reward")
    except ValueError as exc:
        return SessionDump.failed("InvalidResultError", str(exc))
    exception = data.get("exception")
    output = data.get("task_output")
    error = None
    if exception is not None:
        lines = str(exception).strip().splitlines()
        error = ErrorInfo("AgentError", lines[-1] if lines else "", str(exception))
    elif not isinstance(output, dict):
        error = ErrorInfo("InvalidResultError", "the rollout reported no task output")
    return SessionDump(
        result=output if isinstance(output, dict) else None,
        reward=reward,
        metrics=numeric_metrics(data.get("metrics")),
        error=error,
    )


def text_of(message: Message | None) -> str | None:
    """The text parts of a status message, joined (None when it has none)."""
    if message is None:
        return None
    texts = [p.text for p in message.parts if p.WhichOneof("content") == "text"]
    return "\n".join(texts) if texts else None

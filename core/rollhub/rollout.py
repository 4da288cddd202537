"""The ``_rollout`` config, the request a runtime receives, and the result-key layout.

The trainer side puts a ``_rollout`` object into every payload it submits; the agent side
(:class:`rollhub.app.RolloutApp`) validates it with :class:`RolloutConfig` before any work
starts. Results live at ``{exp_id}/{input_id}/{session_id}.json`` in every result store.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rollhub.errors import ConfigError

__all__ = [
    "RESULT_META_KEY",
    "ROLLOUT_KEY",
    "RolloutConfig",
    "RolloutRequest",
    "SubmitReceipt",
    "build_request",
    "new_session_id",
    "result_key",
    "validate_key_part",
]

#: Key of the rollout config inside a payload.
ROLLOUT_KEY = "_rollout"
#: Reserved key under which the app stores its metadata next to the agent's result.
RESULT_META_KEY = "_rollhub"

# Used with fullmatch: a `$` anchor would also match before a final newline ("abc\n").
_KEY_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=@+-]{0,199}")


def validate_key_part(value: str, field_name: str) -> str:
    """Check one component of a result key: no slashes, no ``..``, no NUL, ≤ 200 chars."""
    if not isinstance(value, str) or not _KEY_PART.fullmatch(value) or ".." in value:
        raise ValueError(
            f"{field_name}={value!r} is not a valid key part: use 1-200 characters of "
            f"letters, digits and . _ : = @ + - (not starting with a symbol, no '..', no '/')"
        )
    return value


def result_key(exp_id: str, input_id: str, session_id: str) -> str:
    """The store key of one rollout's result: ``{exp_id}/{input_id}/{session_id}.json``."""
    return "/".join(
        (
            validate_key_part(exp_id, "exp_id"),
            validate_key_part(input_id, "input_id"),
            validate_key_part(session_id, "session_id") + ".json",
        )
    )


class RolloutConfig(BaseModel):
    """The ``_rollout`` object of a payload: who the rollout is and where things go.

    Unknown keys are kept (``extra="allow"``) and passed through to the agent, so trainers can
    add their own fields. ``s3_bucket`` (the field name older toolkits use) is accepted as a
    shorthand for ``result_store="s3://<bucket>"``.
    """

    # NaN and infinities pass float parsing but no JSON writer takes them: refused here, a
    # non-finite deadline_at would make the result unstorable after the rollout ran.
    model_config = ConfigDict(extra="allow", populate_by_name=True, allow_inf_nan=False)

    exp_id: str = Field(description="experiment id; first part of the result key")
    input_id: str = Field(description="prompt id; samples of one prompt share it (GRPO group)")
    session_id: str = Field(description="unique id of this rollout")
    result_store: str = Field(description="result store URL: file:///dir or s3://bucket/prefix")
    base_url: str | None = Field(None, description="OpenAI/Anthropic-compatible model endpoint")
    model_id: str | None = Field(None, description="model name to send to base_url")
    models: dict[str, str] = Field(
        default_factory=dict,
        description="policy name → the model name that reaches it at base_url (runs with "
        "[[policies]]; model_id is the first policy's)",
    )
    api_key: SecretStr | None = Field(None, description="key for base_url (a gateway session)")
    sampling: dict[str, Any] = Field(default_factory=dict, description="sampling parameters")
    callback_url: str | None = Field(None, description="where to POST completion notices")
    weight_version: int | None = Field(None, description="policy version that serves the rollout")
    sample_index: int | None = Field(None, description="index of this sample in its group")
    deadline_at: float | None = Field(
        None,
        description="epoch seconds by which the client needs the result; the app stores a "
        "result that finishes later as a RolloutTimeout error, matching what the client reported",
    )

    @model_validator(mode="before")
    @classmethod
    def _s3_bucket_alias(cls, data: object) -> object:
        if isinstance(data, dict) and "result_store" not in data and data.get("s3_bucket"):
            data = {**data, "result_store": f"s3://{data['s3_bucket']}"}
        return data

    @field_validator("exp_id", "input_id", "session_id")
    @classmethod
    def _key_safe(cls, value: str, info: ValidationInfo) -> str:
        assert info.field_name is not None  # a field validator always knows its field
        return validate_key_part(value, info.field_name)

    @field_validator("result_store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                f"result_store={value!r} is not a URL; use file:///abs/dir or s3://bucket/prefix"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            # A NUL cannot reach a file name: the rollout would run and its result be lost.
            raise ValueError(
                f"result_store={value!r} contains a control character; name a plain "
                f"directory or bucket"
            )
        return value

    @field_validator("callback_url")
    @classmethod
    def _callback_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"callback_url={value!r} is not an http(s) URL; the app POSTs completion "
                f"notices to it (e.g. http://127.0.0.1:8900/rollhub/callback)"
            )
        return value

    @property
    def result_key(self) -> str:
        """Where this rollout's result is stored, relative to the store root."""
        return result_key(self.exp_id, self.input_id, self.session_id)

    def public_dict(self) -> dict[str, Any]:
        """The config without secrets: safe to store next to a result or to log.

        ``callback_url`` is left out too: its path carries the client's token.
        """
        data = self.model_dump(mode="json", exclude={"api_key", "callback_url"})
        return data

    def wire_dict(self) -> dict[str, Any]:
        """The config as sent to an agent, secrets included."""
        data = self.model_dump(mode="json")
        if self.api_key is not None:
            data["api_key"] = self.api_key.get_secret_value()
        return {k: v for k, v in data.items() if v is not None}


@dataclass
class RolloutRequest:
    """One rollout on its way to a runtime: the agent's payload and its ``_rollout`` config."""

    payload: dict[str, Any]
    rollout: RolloutConfig
    #: free space for plugins preparing the request (typed keys, not new attributes).
    extras: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """The JSON body of ``POST /invocations``: the payload plus ``_rollout``."""
        return {**self.payload, ROLLOUT_KEY: self.rollout.wire_dict()}


@dataclass(frozen=True)
class SubmitReceipt:
    """What a runtime returns once it has accepted a rollout (fire-and-forget)."""

    session_id: str
    result_location: str
    runtime: str
    submitted_at: float = field(default_factory=time.time)
    details: dict[str, Any] = field(default_factory=dict)


def new_session_id() -> str:
    """A fresh session id: 35 characters, valid as a key part and as an AgentCore id."""
    return f"rh-{uuid.uuid4().hex}"


def build_request(
    payload: Mapping[str, Any],
    *,
    exp_id: str,
    store_url: str,
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
    callback_url: str | None,
) -> RolloutRequest:
    """Merge required fields → client defaults → per-call overrides and validate them.

    :raises ConfigError: naming the bad ``_rollout`` field and what it accepts.
    """
    if not isinstance(payload, Mapping):
        raise ConfigError(f"payload must be a JSON object (dict), got {type(payload).__name__}")
    body = {k: v for k, v in payload.items() if k != ROLLOUT_KEY}
    fields: dict[str, Any] = {
        "exp_id": exp_id,
        "input_id": _default_input_id(body),
        "session_id": new_session_id(),
        "result_store": store_url,
    }
    if callback_url is not None:
        fields["callback_url"] = callback_url
    embedded = payload.get(ROLLOUT_KEY)
    if isinstance(embedded, Mapping):
        fields.update(embedded)
    fields.update(defaults)
    fields.update(overrides)
    try:
        rollout = RolloutConfig.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "_rollout"
        raise ConfigError(
            f"_rollout.{loc}: {err['msg']} (got {err.get('input')!r}); fix the client default "
            f"or the per-call override",
            field=f"_rollout.{loc}",
        ) from exc
    return RolloutRequest(payload=body, rollout=rollout)


def content_input_id(payload: object) -> str:
    """A stable id from a payload's content: ``h-`` + 16 hex digits of its SHA-256."""
    canon = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=repr)
    return "h-" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def _default_input_id(body: Mapping[str, Any]) -> str:
    value = body.get("id")
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    return content_input_id(body)

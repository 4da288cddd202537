"""The stored result document: build it on the agent side, read it on the client side.

No I/O here. The app calls :func:`build_result_document` once per rollout, and the client
reads what it finds in the store with :func:`read_status` / :func:`read_result`.

A document is the handler's returned dict plus one reserved key,
:data:`~rollhub.rollout.RESULT_META_KEY` (``"_rollhub"``)::

    {
      "rewards": 1.0, "answer": 42, ...,            # the handler's dict, unchanged
      "_rollhub": {
        "schema": 1,
        "status": "ok",                             # or "error"
        "error": null,                              # or {"type", "message", "traceback"}
        "started_at": 1767000000.1, "finished_at": 1767000003.4, "elapsed_s": 3.3,
        "exp_id": "...", "input_id": "...", "session_id": "...", "result_key": "...",
        "payload": {...},                           # the payload, without _rollout
        "rollout": {...}                            # RolloutConfig.public_dict(): no api key
      }
    }

An error document holds only the ``_rollhub`` key.
"""

from __future__ import annotations

import math
import re
import traceback as tb_module
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from rollhub.json_types import JSON, JSONObject
from rollhub.rollout import RESULT_META_KEY, ROLLOUT_KEY, RolloutConfig

__all__ = [
    "SCHEMA_VERSION",
    "InvalidResultError",
    "ResultView",
    "build_result_document",
    "error_info",
    "public_payload",
    "read_result",
    "read_status",
    "redact",
    "validate_result",
]

#: Version of the ``_rollhub`` metadata layout.
SCHEMA_VERSION = 1
REDACTED = "**redacted**"

ResultStatus = Literal["ok", "error"]

_T = TypeVar("_T")


class InvalidResultError(ValueError):
    """A handler returned something that cannot be stored; the message names the key path."""


def validate_result(result: object) -> JSONObject:
    """Check a handler's return value and return it as a plain JSON-ready dict.

    :raises InvalidResultError: naming the offending key path and type, e.g.
        ``result['metrics']['t']: datetime is not JSON serialisable``.
    """
    if not isinstance(result, dict):
        raise InvalidResultError(
            f"result: the handler returned {type(result).__name__}; return a dict "
            f"such as {{'rewards': 1.0}}"
        )
    if RESULT_META_KEY in result:
        raise InvalidResultError(
            f"result[{RESULT_META_KEY!r}]: the key is reserved for rollhub metadata; rename it"
        )
    clean = _check_object(result, "result")
    if "rewards" in clean:
        _check_rewards(clean["rewards"])
    return clean


def _check_object(value: dict[object, object], path: str) -> JSONObject:
    """A JSON-ready copy of a dict whose keys are all strings, or InvalidResultError."""
    out: JSONObject = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidResultError(
                f"{path}: key {key!r} is a {type(key).__name__}; JSON object keys are strings"
            )
        out[key] = _check_json(item, f"{path}[{key!r}]")
    return out


def _check_json(value: object, path: str) -> JSON:
    """A JSON-ready copy of ``value`` (tuples become lists), or InvalidResultError."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidResultError(f"{path}: {value!r} is not valid JSON (NaN and inf are not)")
        return value
    if isinstance(value, dict):
        return _check_object(value, path)
    if isinstance(value, (list, tuple)):
        return [_check_json(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise InvalidResultError(f"{path}: {type(value).__name__} is not JSON serialisable")


def _check_rewards(rewards: JSON) -> None:
    if isinstance(rewards, dict):  # named components: {"solved": 1.0, "verdict": 0.0}
        items = list(rewards.values())
        paths = [f"result['rewards'][{k!r}]" for k in rewards]
    elif isinstance(rewards, list):
        items, paths = rewards, [f"result['rewards'][{i}]" for i in range(len(rewards))]
    else:
        items, paths = [rewards], ["result['rewards']"]
    for path, item in zip(paths, items, strict=True):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise InvalidResultError(
                f"{path}: {item!r} ({type(item).__name__}) is not a number; rewards must be "
                f"a number, a list of numbers or a mapping of names to numbers"
            )
        try:
            finite = math.isfinite(item)
        except OverflowError:  # an int too large for a float (10**400)
            finite = False
        if not finite:
            shown = repr(item) if len(repr(item)) < 40 else f"an integer of {len(str(item))} digits"
            raise InvalidResultError(f"{path}: {shown} is not a finite number")


def error_info(exc: BaseException, *, default_message: str = "") -> dict[str, Any]:
    """``{"type", "message", "traceback"}`` of an exception, for an error document."""
    message = str(exc) or default_message
    trace = "".join(tb_module.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": message, "traceback": trace}


def redact(value: _T, secrets: Iterable[str], *, public: Iterable[str] = ()) -> _T:
    """A copy of ``value`` in which every secret, and every long piece of one, is masked.

    Pieces matter because exception messages often show a truncated ``repr`` of the payload
    (pydantic's ``input_value=...ub-test-SECRET-9f8e7d'}``): any run of at least
    :data:`FRAGMENT_CHARS` characters of a secret of :data:`MIN_SECRET_CHARS` or more is
    masked, except pieces that also occur in a ``public`` string (a key built from the
    session id must not mask the session id). Shorter secrets are masked only when whole.
    """
    words = [s for s in secrets if s and len(s) >= 4]
    if not words:
        return value
    known = [p for p in public if p]
    maskers = [_Masker(w, known) for w in words]
    # _redact keeps the shape: a str stays a str, a dict a dict, a list a list
    return cast(_T, _redact(value, maskers))


#: Secrets at least this long also have their pieces masked.
MIN_SECRET_CHARS = 16
#: Shortest piece of a secret that is masked.
FRAGMENT_CHARS = 10


class _Masker:
    """Masks one secret; one regex finds any of its pieces in a single pass."""

    def __init__(self, secret: str, public: list[str]) -> None:
        self.secret = secret
        k = FRAGMENT_CHARS
        pieces = []
        if len(secret) >= MIN_SECRET_CHARS:
            for j in range(len(secret) - k + 1):
                piece = secret[j : j + k]
                if not any(piece in p for p in public):
                    pieces.append(piece)
        self.offsets = {p: secret.index(p) for p in pieces}
        self.pattern = re.compile("|".join(map(re.escape, pieces))) if pieces else None

    def __call__(self, text: str) -> str:
        if self.secret in text:
            text = text.replace(self.secret, REDACTED)
        if self.pattern is None or len(text) < FRAGMENT_CHARS:
            return text
        match = self.pattern.search(text)
        if match is None:
            return text
        secret, out, pos = self.secret, [], 0
        while match is not None:
            # grow the match both ways while text and secret keep agreeing
            a, b = match.start(), match.end()
            sa = self.offsets[match.group()]
            sb = sa + (b - a)
            while a > pos and sa > 0 and text[a - 1] == secret[sa - 1]:
                a, sa = a - 1, sa - 1
            while b < len(text) and sb < len(secret) and text[b] == secret[sb]:
                b, sb = b + 1, sb + 1
            out.append(text[pos:a])
            out.append(REDACTED)
            pos = b
            match = self.pattern.search(text, pos)
        out.append(text[pos:])
        return "".join(out)


def _redact(value: object, maskers: list[_Masker]) -> object:
    if isinstance(value, str):
        for mask in maskers:
            value = mask(value)
        return value
    if isinstance(value, dict):
        return {_redact(k, maskers): _redact(v, maskers) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, maskers) for v in value]
    return value


def public_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as stored: ``_rollout`` (which carries the api key) left out."""
    return {k: v for k, v in payload.items() if k != ROLLOUT_KEY}


def build_result_document(
    *,
    rollout: RolloutConfig,
    payload: dict[str, Any],
    started_at: float,
    finished_at: float,
    result: object = None,
    error: BaseException | dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The document to store for one finished rollout.

    :param rollout: the validated ``_rollout`` config.
    :param payload: the invocation payload (``_rollout`` is dropped from the stored copy).
    :param started_at: epoch seconds when the handler started.
    :param finished_at: epoch seconds when it returned or failed.
    :param result: the handler's return value (ignored when ``error`` is given).
    :param error: the exception the handler raised (cancellation included), or an
        :func:`error_info` dict.
    :returns: a JSON-ready dict. A return value that fails :func:`validate_result` turns into
        an error document of type ``InvalidResultError``. The api key of ``rollout`` is
        replaced wherever it appears, so it never reaches a store.
    """
    body: dict[str, Any] = {}
    err: dict[str, Any] | None = None
    if error is not None:
        err = error if isinstance(error, dict) else error_info(error)
    else:
        try:
            body = validate_result(result)
        except InvalidResultError as exc:
            err = {"type": "InvalidResultError", "message": str(exc), "traceback": None}
    meta = {
        "schema": SCHEMA_VERSION,
        "status": "ok" if err is None else "error",
        "error": err,
        "started_at": started_at,
        "finished_at": finished_at,
        "elapsed_s": round(finished_at - started_at, 6),
        "exp_id": rollout.exp_id,
        "input_id": rollout.input_id,
        "session_id": rollout.session_id,
        "result_key": rollout.result_key,
        "payload": _check_json_lenient(public_payload(payload)),
        "rollout": rollout.public_dict(),
    }
    document = {**body, RESULT_META_KEY: meta}
    secrets = [rollout.api_key.get_secret_value()] if rollout.api_key is not None else []
    public = [v for v in rollout.public_dict().values() if isinstance(v, str)]
    return redact(document, secrets, public=[*public, rollout.result_key])


def _check_json_lenient(value: object) -> JSON:
    """The payload came from JSON, but a caller may pass anything: fall back to ``repr``."""
    try:
        return _check_json(value, "payload")
    except InvalidResultError:
        return {"repr": repr(value)}


@dataclass(frozen=True)
class ResultView:
    """A stored document, split into the agent's result and rollhub's metadata."""

    status: ResultStatus
    result: dict[str, Any]
    error: dict[str, Any] | None
    meta: dict[str, Any]

    @property
    def rewards(self) -> float | list[float] | None:
        """The result's ``rewards`` (None when absent or when the rollout failed)."""
        return self.result.get("rewards") if self.status == "ok" else None


def read_status(document: dict[str, Any]) -> ResultStatus:
    """``"ok"`` or ``"error"`` for a stored document.

    A document without ``_rollhub`` metadata (written by an agent that stores its own
    results) counts as ``"ok"``.

    :raises InvalidResultError: the document is not a dict or its status is unknown.
    """
    if not isinstance(document, dict):
        raise InvalidResultError(
            f"a result document is a JSON object, got {type(document).__name__}"
        )
    meta = document.get(RESULT_META_KEY)
    if meta is None:
        return "ok"
    status = meta.get("status") if isinstance(meta, dict) else None
    if status not in ("ok", "error"):
        raise InvalidResultError(
            f"document[{RESULT_META_KEY!r}]['status'] is {status!r}; expected 'ok' or 'error'"
        )
    return status


def read_result(document: dict[str, Any]) -> ResultView:
    """Split a stored document into status, the agent's result, the error and metadata."""
    status = read_status(document)
    meta = document.get(RESULT_META_KEY) or {}
    body = {k: v for k, v in document.items() if k != RESULT_META_KEY}
    error = meta.get("error") if status == "error" else None
    if status == "error" and not isinstance(error, dict):
        error = {"type": "UnknownError", "message": str(error), "traceback": None}
    return ResultView(status=status, result=body, error=error, meta=meta)

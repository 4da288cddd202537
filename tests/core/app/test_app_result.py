"""The result document: validation, error documents, secrets, and the reader."""

from __future__ import annotations

import asyncio
import datetime
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollhub.results.document import (
    InvalidResultError,
    build_result_document,
    error_info,
    read_result,
    read_status,
    validate_result,
)
from rollhub.rollout import RESULT_META_KEY, RolloutConfig

SECRET = "sk-very-secret-key-123"


def _rollout(**kw: object) -> RolloutConfig:
    data = {
        "exp_id": "e1",
        "input_id": "q1",
        "session_id": "s1",
        "result_store": "file:///tmp/x",
        "api_key": SECRET,
        **kw,
    }
    return RolloutConfig.model_validate(data)


def _doc(**kw: object) -> dict:
    payload = {"question": "1+1", "_rollout": _rollout().wire_dict()}
    return build_result_document(
        rollout=_rollout(), payload=payload, started_at=100.0, finished_at=102.5, **kw
    )


def test_ok_document_has_result_and_metadata() -> None:
    doc = _doc(result={"rewards": [1, 0.5], "answer": 2})
    meta = doc[RESULT_META_KEY]
    assert doc["rewards"] == [1, 0.5] and doc["answer"] == 2
    assert meta["status"] == "ok" and meta["error"] is None
    assert meta["elapsed_s"] == 2.5
    assert (meta["exp_id"], meta["input_id"], meta["session_id"]) == ("e1", "q1", "s1")
    assert meta["result_key"] == "e1/q1/s1.json"
    assert meta["payload"] == {"question": "1+1"}
    assert "api_key" not in meta["rollout"] and meta["rollout"]["exp_id"] == "e1"
    assert read_status(doc) == "ok"
    view = read_result(doc)
    assert view.result == {"rewards": [1, 0.5], "answer": 2} and view.rewards == [1, 0.5]


def test_error_document_keeps_type_message_traceback() -> None:
    try:
        raise KeyError("missing-thing")
    except KeyError as exc:
        doc = _doc(error=exc)
    meta = doc[RESULT_META_KEY]
    assert set(doc) == {RESULT_META_KEY}
    assert meta["status"] == "error"
    assert meta["error"]["type"] == "KeyError"
    assert "missing-thing" in meta["error"]["message"]
    assert (
        "Traceback" in meta["error"]["traceback"]
        and "test_error_document" in (meta["error"]["traceback"])
    )
    view = read_result(doc)
    assert view.status == "error" and view.rewards is None and view.error["type"] == "KeyError"


def test_cancelled_error_gets_a_default_message() -> None:
    info = error_info(asyncio.CancelledError(), default_message="cancelled by test")
    assert info["type"] == "CancelledError" and info["message"] == "cancelled by test"


@pytest.mark.parametrize(
    ("result", "fragment"),
    [
        ({"metrics": {"t": datetime.datetime(2026, 1, 1)}}, "result['metrics']['t']: datetime"),
        ({"items": [1, {2, 3}]}, "result['items'][1]: set is not JSON serialisable"),
        ([1, 2], "handler returned list"),
        ("done", "handler returned str"),
        ({1: "x"}, "key 1 is a int"),
        ({"rewards": float("nan")}, "result['rewards']: nan is not valid JSON"),
        ({"rewards": [1.0, math.inf]}, "result['rewards'][1]: inf"),
        (
            {"rewards": 10**400},
            "result['rewards']: an integer of 401 digits is not a finite number",
        ),
        ({"rewards": "1.0"}, "result['rewards']: '1.0' (str) is not a number"),
        ({"rewards": True}, "(bool) is not a number"),
        ({"rewards": [0.5, None]}, "result['rewards'][1]: None"),
        ({RESULT_META_KEY: {}}, "reserved"),
    ],
)
def test_invalid_results_become_error_documents(result: object, fragment: str) -> None:
    with pytest.raises(InvalidResultError) as err:
        validate_result(result)
    assert fragment in str(err.value)
    doc = _doc(result=result)
    assert read_status(doc) == "error"
    assert doc[RESULT_META_KEY]["error"]["type"] == "InvalidResultError"
    assert fragment in doc[RESULT_META_KEY]["error"]["message"]


def test_tuples_are_stored_as_lists_and_rewards_may_be_missing() -> None:
    assert validate_result({"pair": (1, 2), "nested": {"ok": None}}) == {
        "pair": [1, 2],
        "nested": {"ok": None},
    }


def test_api_key_is_redacted_everywhere() -> None:
    doc = _doc(result={"echo": f"key was {SECRET}", SECRET: 1, "list": [SECRET]})
    assert SECRET not in repr(doc)
    try:
        raise RuntimeError(f"auth failed for {SECRET}")
    except RuntimeError as exc:
        err_doc = _doc(error=exc)
    assert SECRET not in repr(err_doc)


def test_pieces_of_the_key_are_masked_but_public_ids_are_not() -> None:
    from rollhub.results.document import redact

    key = "gw-session-000123-abcdefghijklmnopqrstuv"
    doc = {"sid": "session-000123", "msg": "input_value=...00123-abcdefghijklmnop'}"}
    out = redact(doc, [key], public=["session-000123"])
    assert out["sid"] == "session-000123"
    assert "abcdefghij" not in out["msg"] and out["msg"].startswith("input_value=...")
    assert redact({"a": "EMPTY"}, ["EMPTY"]) == {"a": "**redacted**"}
    assert redact({"a": "xyz"}, ["xyz"]) == {"a": "xyz"}  # too short to mask safely


def test_read_status_of_foreign_and_broken_documents() -> None:
    assert read_status({"rewards": 1.0}) == "ok"  # written by an agent of its own
    with pytest.raises(InvalidResultError, match="expected 'ok' or 'error'"):
        read_status({RESULT_META_KEY: {"status": "weird"}})
    with pytest.raises(InvalidResultError, match="JSON object"):
        read_status(["not", "a", "dict"])  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    start=st.integers(0, 20),
    length=st.integers(10, 40),
)
def test_no_long_piece_of_the_key_survives(
    before: str, after: str, start: int, length: int
) -> None:
    from rollhub.results.document import redact

    key = "sk-Zq81fKpXw0RuT7bLmN3cVyHs"
    leaked = before + key[start : start + length] + after
    out = redact({"msg": leaked}, [key])["msg"]
    pieces = [key[i : i + 10] for i in range(len(key) - 9)]
    if len(key[start : start + length]) >= 10:
        assert not [p for p in pieces if p in out]

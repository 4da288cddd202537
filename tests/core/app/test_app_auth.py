"""Request signatures (rollhub.app.auth) and the app's guard, without a network."""

from __future__ import annotations

import time

from rollhub.app.auth import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_request, verify_request
from rollhub.app.guard import RequestGuard

SECRET = "unit-secret"


def test_a_signed_request_verifies_and_any_change_breaks_it() -> None:
    body = b'{"_rollout": {}}'
    headers = sign_request(SECRET, "POST", "/invocations", body)
    assert verify_request(SECRET, "POST", "/invocations", body, headers) is None
    # Header names are case-insensitive on the wire.
    lowered = {k.lower(): v for k, v in headers.items()}
    assert verify_request(SECRET, "post", "/invocations", body, lowered) is None
    assert "does not match" in verify_request(SECRET, "POST", "/invocations", body + b" ", headers)
    assert "does not match" in verify_request(SECRET, "POST", "/rollouts", body, headers)
    assert "does not match" in verify_request(SECRET, "GET", "/invocations", body, headers)
    assert "does not match" in verify_request("other", "POST", "/invocations", body, headers)


def test_missing_bad_or_stale_headers_are_refused_with_a_reason() -> None:
    assert "only accepts signed requests" in verify_request(SECRET, "GET", "/rollouts", b"", {})
    bad_time = {TIMESTAMP_HEADER: "soon", SIGNATURE_HEADER: "v1=00"}
    assert "not a number" in verify_request(SECRET, "GET", "/rollouts", b"", bad_time)
    old = sign_request(SECRET, "GET", "/rollouts", now=time.time() - 301)
    assert "clock" in verify_request(SECRET, "GET", "/rollouts", b"", old)
    future = sign_request(SECRET, "GET", "/rollouts", now=time.time() + 301)
    assert "clock" in verify_request(SECRET, "GET", "/rollouts", b"", future)
    wrong_version = dict(sign_request(SECRET, "GET", "/rollouts"))
    wrong_version[SIGNATURE_HEADER] = wrong_version[SIGNATURE_HEADER].replace("v1=", "v2=")
    assert "does not match" in verify_request(SECRET, "GET", "/rollouts", b"", wrong_version)


def test_store_refusals(monkeypatch) -> None:
    monkeypatch.delenv("ROLLHUB_ALLOWED_STORES", raising=False)
    open_guard = RequestGuard(secret=None, allowed_stores=None)
    assert open_guard.store_refusal("s3://anything/at/all") is None
    assert "'..'" in open_guard.store_refusal("file:///data/runs/../../etc")
    assert "'..'" in open_guard.store_refusal("file:///data/runs/%2e%2e/etc")
    monkeypatch.setenv("ROLLHUB_ALLOWED_STORES", "s3://results/, file:///data/runs")
    guard = RequestGuard(secret=None, allowed_stores=None)
    assert guard.store_refusal("s3://results/exp1") is None
    assert guard.store_refusal("file:///data/runs") is None
    assert guard.store_refusal("file:///data/runs/sub") is None
    refusal = guard.store_refusal("file:///data/runs-other")
    assert refusal is not None and "ROLLHUB_ALLOWED_STORES" in refusal
    assert guard.store_refusal("s3://results-evil/x") is not None

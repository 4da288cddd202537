"""Signed requests between a runtime and the agent app it starts.

A runtime that starts the app itself (the ``local`` runtime) gives every worker a random
secret in ``ROLLHUB_APP_SECRET`` and signs each request: an HMAC-SHA256 over the
timestamp, method, path and raw body, sent as two headers::

    X-Rollhub-Timestamp: 1733000000
    X-Rollhub-Signature: v1=<64 hex digits>

An app with a secret refuses unsigned or badly signed ``POST /invocations``,
``GET /rollouts`` and ``DELETE /rollouts/{id}`` with 401, so nobody else who can reach the
port can start rollouts, choose where results go or stop someone else's rollouts. Apps
behind AgentCore Runtime have no secret: AgentCore's IAM authorization fronts them.

This module has no server dependencies; the client side imports it too.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Mapping

__all__ = [
    "MAX_SKEW_S",
    "SECRET_ENV",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "new_secret",
    "sign_request",
    "verify_request",
]

log = logging.getLogger(__name__)

#: Environment variable that hands the secret to the app process.
SECRET_ENV = "ROLLHUB_APP_SECRET"
SIGNATURE_HEADER = "X-Rollhub-Signature"
TIMESTAMP_HEADER = "X-Rollhub-Timestamp"
#: How far a request's timestamp may be from the app's clock; bounds replays.
MAX_SKEW_S = 300.0

_VERSION = "v1"


def new_secret() -> str:
    """A fresh random secret (256 bits, hex)."""
    return secrets.token_hex(32)


def _digest(secret: str, timestamp: str, method: str, path: str, body: bytes) -> str:
    message = f"{timestamp}\n{method.upper()}\n{path}\n".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_request(
    secret: str, method: str, path: str, body: bytes = b"", *, now: float | None = None
) -> dict[str, str]:
    """The headers that sign one request (``path`` without the query string)."""
    timestamp = str(int(now if now is not None else time.time()))
    return {
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: f"{_VERSION}={_digest(secret, timestamp, method, path, body)}",
    }


def verify_request(
    secret: str,
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    now: float | None = None,
) -> str | None:
    """Check a request's signature.

    :returns: None when it is valid, else why it is not (for the 401 answer).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower())
    signature = lowered.get(SIGNATURE_HEADER.lower())
    if not timestamp or not signature:
        return (
            f"this app only accepts signed requests ({SIGNATURE_HEADER} and "
            f"{TIMESTAMP_HEADER} headers); send them through the runtime that started it"
        )
    try:
        sent = float(timestamp)
    except ValueError:
        return f"{TIMESTAMP_HEADER}={timestamp!r} is not a number of seconds"
    current = now if now is not None else time.time()
    if abs(current - sent) > MAX_SKEW_S:
        return f"{TIMESTAMP_HEADER} is more than {MAX_SKEW_S:.0f} s from the app's clock"
    version, _, given = signature.partition("=")
    expected = _digest(secret, timestamp, method, path, body)
    if version != _VERSION or not hmac.compare_digest(given, expected):
        return "the request signature does not match"
    return None

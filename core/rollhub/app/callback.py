"""Completion notices: after a result is stored, tell ``_rollout.callback_url``.

The notice is a hint that lets the client read the store at once instead of polling; the
store stays the source of truth. Delivery is retried briefly and a failure is only logged.

Wire format (``POST callback_url``, ``Content-Type: application/json``)::

    {"session_id": "...", "exp_id": "...", "input_id": "...",
     "result_key": "exp/input/session.json", "status": "ok"}     # or "error"

When the app could not store the result, the notice says so and carries the cause, so the
client ends the rollout as ``store_error`` at once instead of waiting for its deadline::

    {..., "status": "store_error", "error": {"type": "StoreError", "message": "..."}}

Any 2xx answer counts as delivered. 408, 429 and 5xx answers and connection errors are
retried; other 4xx answers are not (the receiver rejected the notice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import httpx

from rollhub.rollout import RolloutConfig

__all__ = ["DEFAULT_BACKOFF_S", "DEFAULT_TIMEOUT_S", "completion_notice", "send_notice"]

log = logging.getLogger(__name__)

#: Waits before each retry; one more try than entries.
DEFAULT_BACKOFF_S: tuple[float, ...] = (0.1, 0.3, 1.0)
#: Per-try timeout.
DEFAULT_TIMEOUT_S = 2.0

_RETRY_STATUS = frozenset({408, 429})


def completion_notice(
    rollout: RolloutConfig, status: str, *, error: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON body of a completion notice (``error`` only for ``store_error``)."""
    notice: dict[str, Any] = {
        "session_id": rollout.session_id,
        "exp_id": rollout.exp_id,
        "input_id": rollout.input_id,
        "result_key": rollout.result_key,
        "status": status,
    }
    if error is not None:
        notice["error"] = error
    return notice


async def send_notice(
    client: httpx.AsyncClient,
    url: str,
    notice: dict[str, Any],
    *,
    backoff_s: Sequence[float] = DEFAULT_BACKOFF_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """POST ``notice`` to ``url``; retry after each wait in ``backoff_s``.

    :returns: True when a try got a 2xx answer. Never raises for delivery failures.
    """
    attempts = len(backoff_s) + 1
    last = ""
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(backoff_s[attempt - 1])
        try:
            response = await client.post(url, json=notice, timeout=timeout_s)
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
            continue
        if response.is_success:
            log.debug("completion notice for %s delivered", notice.get("session_id"))
            return True
        last = f"HTTP {response.status_code}"
        if response.status_code < 500 and response.status_code not in _RETRY_STATUS:
            break
    log.warning(
        "completion notice for session %s to %s not delivered (%s); the result is in the store",
        notice.get("session_id"),
        url,
        last,
    )
    return False

"""Writing a rollout's result: build its document, then put it in the store with retries.

The one place a result document reaches a :class:`~rollhub.stores.base.ResultStore`. The
agent app calls :func:`store_result` once per rollout, from its runner; building
(validation, redaction) and writing run in threads, so a large result never stalls the
app's event loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from rollhub.results.document import build_result_document
from rollhub.rollout import RESULT_META_KEY, RolloutConfig
from rollhub.stores.base import ResultStore

__all__ = ["STORE_ATTEMPTS", "store_result", "write_document"]

log = logging.getLogger(__name__)

#: Tries of a store write before the rollout is given up as unstorable.
STORE_ATTEMPTS = 3


async def store_result(
    store: ResultStore,
    rollout: RolloutConfig,
    payload: dict[str, Any],
    *,
    started_at: float,
    finished_at: float,
    result: object,
    error: BaseException | dict[str, Any] | None,
) -> tuple[str | None, str]:
    """Build the rollout's document and store it.

    :returns: ``(why it could not be stored or None, the document's status)``.
    """
    build = functools.partial(
        build_result_document,
        rollout=rollout,
        payload=payload,
        started_at=started_at,
        finished_at=finished_at,
    )
    try:
        document = await asyncio.to_thread(build, result=result, error=error)
    except Exception as exc:  # a bug here must still leave a terminal result behind
        log.exception("building the result document of %s failed", rollout.session_id)
        document = build(error=exc)
    failure = await write_document(store, rollout, document)
    return failure, document[RESULT_META_KEY]["status"]


async def write_document(
    store: ResultStore, rollout: RolloutConfig, document: dict[str, Any]
) -> str | None:
    """Write with a few quick retries; None when stored, else the cause."""
    delay = 0.2
    for attempt in range(1, STORE_ATTEMPTS + 1):
        try:
            await asyncio.to_thread(store.put, rollout.result_key, document)
            return None
        except Exception as exc:
            if attempt == STORE_ATTEMPTS:
                cause = (
                    f"could not store the result at {store.location(rollout.result_key)} "
                    f"after {attempt} tries: {type(exc).__name__}: {exc}"
                )
                log.error("rollout %s: %s", rollout.session_id, cause)
                return cause
            log.warning("store write of %s failed (%s); retrying", rollout.session_id, exc)
            await asyncio.sleep(delay)
            delay *= 3
    return "the store write was not attempted"  # pragma: no cover

"""Reading results that agentcore-rl-toolkit's app stored, as rollhub result documents.

Upstream's app writes the handler's dict plus ``status_code``, ``stop_reason``,
``input_id``, ``s3_bucket``, ``result_key`` and ``payload`` at the same key rollhub uses
(``{exp_id}/{input_id}/{session_id}.json``); a failure is ``status_code`` 500 with the
message in ``stop_reason`` and a ``traceback``. It has no ``_rollhub`` metadata, so a plain
rollhub store would read every such document, failures included, as ``ok``.

:class:`UpstreamLayoutStore` wraps any store and adds the ``_rollhub`` status to upstream
documents as it reads them; rollhub documents pass through unchanged::

    store = UpstreamLayoutStore(open_store("s3://rollouts"))
    client = AsyncRolloutClient(runtime, store, exp_id="exp1", defaults={"s3_bucket": "rollouts"})
"""

from __future__ import annotations

import logging
import re
from typing import Any

from rollhub.rollout import RESULT_META_KEY
from rollhub.stores.base import ResultStore

__all__ = ["UPSTREAM_FIELDS", "UpstreamLayoutStore", "from_upstream_document"]

log = logging.getLogger(__name__)

#: Fields upstream's app adds to every stored document.
UPSTREAM_FIELDS = ("status_code", "stop_reason", "input_id", "s3_bucket", "result_key", "payload")
_EXC_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b")


def from_upstream_document(document: dict[str, Any]) -> dict[str, Any]:
    """A document upstream's app stored, with the ``_rollhub`` status rollhub reads.

    Documents that carry ``_rollhub`` already, or lack ``status_code``, are returned as
    they are. ``status_code`` below 400 is ``ok``; anything else is an ``error`` whose
    type is the exception named on the traceback's last line (``AgentError`` if none).
    """
    if RESULT_META_KEY in document or "status_code" not in document:
        return document
    try:
        code = int(document["status_code"])
    except (TypeError, ValueError):
        code = 500
    meta: dict[str, Any] = {
        "schema": 1,
        "status": "ok" if code < 400 else "error",
        "error": None,
        "layout": "agentcore-rl",
        "input_id": document.get("input_id"),
        "result_key": document.get("result_key"),
    }
    if code >= 400:
        trace = document.get("traceback")
        meta["error"] = {
            "type": _exception_type(trace) or "AgentError",
            "message": str(document.get("stop_reason") or f"status_code {code}"),
            "traceback": trace if isinstance(trace, str) else None,
        }
    return {**document, RESULT_META_KEY: meta}


def _exception_type(trace: object) -> str | None:
    if not isinstance(trace, str):
        return None
    for line in reversed(trace.strip().splitlines()):
        match = _EXC_LINE.match(line.strip())
        if match:
            return match["type"].rsplit(".", 1)[-1]
    return None


def _runtime_session_key(key: str) -> str | None:
    """``key`` with its session id as the ``agentcore`` runtime sends it, if that differs."""
    from rollhub.runtimes.agentcore import agentcore_session_id

    head, _, name = key.rpartition("/")
    if not name.endswith(".json"):
        return None
    session_id = name.removesuffix(".json")
    try:
        runtime_id = agentcore_session_id(session_id)
    except Exception:  # an id the runtime refuses never reached an upstream app
        return None
    if runtime_id == session_id:
        return None
    return f"{head}/{runtime_id}.json" if head else f"{runtime_id}.json"


class UpstreamLayoutStore(ResultStore):
    """A store whose reads turn upstream documents into rollhub ones; writes pass through.

    :param inner: the store the documents live in (``s3://bucket`` for upstream agents).
    """

    name = "agentcore-rl"

    def __init__(self, inner: ResultStore) -> None:
        self.inner = inner

    @classmethod
    def from_url(cls, url: str, **options: Any) -> UpstreamLayoutStore:
        """Open ``url`` with rollhub's stores and wrap it."""
        from rollhub.stores import open_store

        return cls(open_store(url, **options))

    @property
    def url(self) -> str:
        """The wrapped store's URL (rollouts name it as their ``result_store``)."""
        return self.inner.url

    def location(self, key: str) -> str:
        """The wrapped store's URL for ``key``."""
        return self.inner.location(key)

    def put(self, key: str, document: dict[str, Any]) -> None:
        """Write through to the wrapped store."""
        self.inner.put(key, document)

    def get(self, key: str) -> dict[str, Any] | None:
        """Read a document; an upstream one gains its ``_rollhub`` status.

        Upstream's app names the file after the AgentCore session id, which rollhub's
        ``agentcore`` runtime lengthens for ids under the service's minimum; that key is
        tried when the rollout's own is absent.
        """
        document = self.inner.get(key)
        if document is None:
            runtime_key = _runtime_session_key(key)
            if runtime_key is not None:
                document = self.inner.get(runtime_key)
        return None if document is None else from_upstream_document(document)

    def exists(self, key: str) -> bool:
        """Whether ``key`` (or its runtime-session twin) exists in the wrapped store."""
        if self.inner.exists(key):
            return True
        runtime_key = _runtime_session_key(key)
        return runtime_key is not None and self.inner.exists(runtime_key)

    def list(self, prefix: str = "") -> list[str]:
        """Keys of the wrapped store starting with ``prefix``."""
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        """Delete from the wrapped store."""
        self.inner.delete(key)

    def __getattr__(self, name: str) -> Any:
        # Store-specific extras (clean_temp, size checks) stay reachable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

"""One call to a gateway's admin routes, with its error statuses turned into typed errors.

Used by the token source for a gateway served elsewhere and by the pool for its replicas:
both read traces and finish sessions through the same routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollhub.errors import CaptureLost, TokenRetrievalError

if TYPE_CHECKING:
    import aiohttp

__all__ = ["admin_call"]


async def admin_call(
    http: aiohttp.ClientSession,
    url: str,
    method: str,
    path: str,
    *,
    who: str,
    json: object = None,
    missing_ok: bool = False,
    **context: object,
) -> Any:
    """``method url+path`` on an ``aiohttp`` session; the JSON body, or None for a 204 (and
    for a 404 with ``missing_ok``). The body is what the admin route answers (an object
    whose keys its callers read), as ``aiohttp`` parses it.

    Connection errors propagate as they are (callers tell a dead peer from a slow one).

    :param who: how messages name the gateway (``gateway http://…``, ``gateway replica 1 …``).
    :param context: added to the error's context (e.g. ``replica``, ``session_id``).
    :raises CaptureLost: the gateway answered 410: the session's capture is lost (the
        engine failed under it, or its journal could not rebuild it).
    :raises TokenRetrievalError: the gateway answered another error status; context
        ``status`` and ``context``.
    """
    async with http.request(method, f"{url}{path}", json=json) as resp:
        if resp.status == 204 or (missing_ok and resp.status == 404):
            return None
        body = await resp.json(content_type=None)
        if resp.status >= 400:
            message = (body or {}).get("error", {}).get("message", str(body))
            error = CaptureLost if resp.status == 410 else TokenRetrievalError
            raise error(
                f"{who} answered {resp.status} to {method} {path}: {message}",
                status=resp.status,
                **context,
            )
        return body

"""Who may use an app, and where a rollout may send things.

The app's request checks in one place: signatures (:mod:`rollhub.app.auth`), the control
endpoints (``GET /rollouts``, ``DELETE /rollouts/{id}``), the result stores a payload may
name and the hosts a completion notice may go to.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse

from rollhub.app.auth import verify_request
from rollhub.rollout import ROLLOUT_KEY

__all__ = ["ALLOWED_STORES_ENV", "RequestGuard", "is_loopback"]

log = logging.getLogger(__name__)

#: Comma-separated store URL prefixes an app accepts when none are passed in code.
ALLOWED_STORES_ENV = "ROLLHUB_ALLOWED_STORES"
FILE_SCHEME = "file://"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is a loopback address or ``localhost`` (None or empty: no)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class RequestGuard:
    """The checks a :class:`~rollhub.app.RolloutApp` applies to each request.

    :param secret: requests must be signed with it (None or empty: no signatures).
    :param allowed_stores: store URL prefixes a ``result_store`` must fall under (None:
        ``ROLLHUB_ALLOWED_STORES``, else any).
    :param callback_hosts: hosts ``callback_url`` may name besides the submitting peer.
    """

    def __init__(
        self,
        *,
        secret: str | None,
        allowed_stores: Sequence[str] | None,
        callback_hosts: Sequence[str] = (),
    ) -> None:
        self.secret = secret or None
        if allowed_stores is None:
            env = os.environ.get(ALLOWED_STORES_ENV, "")
            allowed_stores = [p.strip() for p in env.split(",") if p.strip()] or None
        self.allowed_stores = (
            None if allowed_stores is None else [p.rstrip("/") for p in allowed_stores]
        )
        self.callback_hosts = {h.lower() for h in callback_hosts}

    # Requests ------------------------------------------------------------------------------

    def check_signature(self, request: Request, body: bytes) -> JSONResponse | None:
        """None when the request may go on, else the 401 answer."""
        if self.secret is None:
            return None
        why = verify_request(self.secret, request.method, request.url.path, body, request.headers)
        if why is None:
            return None
        peer = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path, peer, why)
        return JSONResponse({"error": why}, status_code=401)

    def check_control(self, request: Request) -> JSONResponse | None:
        """Listing and cancelling: signed when there is a secret, else loopback peers only."""
        if self.secret is not None:
            return self.check_signature(request, b"")
        peer = request.client.host if request.client else None
        if is_loopback(peer):
            return None
        return JSONResponse(
            {
                "error": f"{request.method} {request.url.path} is only served to loopback "
                f"clients when the app has no secret; set ROLLHUB_APP_SECRET and sign requests"
            },
            status_code=403,
        )

    def check_callback(self, request: Request, payload: object) -> JSONResponse | None:
        """``callback_url`` must point back at the peer that submitted the rollout."""
        raw = payload.get(ROLLOUT_KEY) if isinstance(payload, dict) else None
        url = raw.get("callback_url") if isinstance(raw, dict) else None
        if not isinstance(url, str):
            return None
        field = f"{ROLLOUT_KEY}.callback_url"
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError as exc:  # an unclosed '[' and the like: no host can be read
            return JSONResponse(
                {
                    "error": f"{field}: {url!r} is not a valid URL ({exc}); send an http(s) "
                    f"URL such as http://127.0.0.1:8900/rollhub/callback",
                    "field": field,
                },
                status_code=400,
            )
        peer = (request.client.host if request.client else "") or ""
        if host == peer.lower() or host in self.callback_hosts:
            return None
        if is_loopback(host) and is_loopback(peer):
            return None
        return JSONResponse(
            {
                "error": f"{field}: completion notices only go back to the client that "
                f"submitted the rollout ({peer or 'unknown peer'}), not to {host or url!r}; "
                f"list other hosts in RolloutApp(callback_hosts=[...])",
                "field": field,
            },
            status_code=400,
        )

    # Stores -------------------------------------------------------------------------------

    def store_refusal(self, url: str) -> str | None:
        """Why the app refuses to write to ``url`` (None: it may)."""
        if "\x00" in url:  # no file name holds one; realpath would raise
            return f"{url!r} contains a NUL byte; name a plain directory or bucket"
        _scheme, _, rest = url.partition("://")
        segments = unquote(rest).split("/")
        if ".." in segments:
            return f"{url!r} climbs out of its directory with '..'; name the directory itself"
        if self.allowed_stores is None:
            return None
        real = _real_dir(url)
        for prefix in self.allowed_stores:
            real_prefix = _real_dir(prefix)
            if real is not None and real_prefix is not None:
                # Directories compare where they really are: a link named as the store
                # (allowed/link -> ../outside) must not carry writes out of the prefix.
                if real == real_prefix or real.startswith(real_prefix.rstrip("/") + "/"):
                    return None
            elif url.rstrip("/") == prefix or url.startswith(prefix + "/"):
                return None
        allowed = ", ".join(self.allowed_stores)
        where = f" (it resolves to {real!r})" if real is not None else ""
        return (
            f"{url!r}{where} is not a store this app writes to; it accepts {allowed} "
            f"(set RolloutApp(allowed_stores=[...]) or {ALLOWED_STORES_ENV})"
        )


def _real_dir(url: str) -> str | None:
    """The directory a ``file://`` URL names once links are resolved (None: not file://)."""
    if not url.startswith(FILE_SCHEME):
        return None
    path = url[len(FILE_SCHEME) :]
    # As FileResultStore opens it: relative to the working directory, ~ expanded.
    return os.path.realpath(os.path.expanduser(path or "."))

"""The ``rllm`` token source: capture sessions served by a real ``rllm-model-gateway``.

With ``engine_url`` set, :meth:`RllmTokenSource.start` runs ``rllm-model-gateway`` as a
child process on 127.0.0.1 in front of that OpenAI-compatible engine (it must return
vLLM-style token ids: vLLM >= 0.11). With ``url`` set it attaches to a gateway that already
runs. Either way agents reach it through a loopback relay
(:class:`~rollhub_rllm.relay.SessionRelay`) at ``{relay}/sessions/{sid}/v1``, which counts
each session's answered calls.

The gateway stores one trace per call and writes them fire-and-forget, so
:meth:`~RllmTokenSource.fetch_traces` waits (up to ``trace_wait_s``) until the gateway holds
as many answered traces as the relay counted, then stitches them into
:class:`~rollhub.trace.TraceRecord`\\ s (:mod:`rollhub_rllm.traces`). A session whose traces
do not all arrive fails with :class:`~rollhub.errors.TokenRetrievalError`: a trainer never
gets an episode with a missing turn. Closing a session deletes its traces from the gateway.

Example ``rollhub.toml``::

    [token_source]
    name = "rllm"
    engine_url = "http://127.0.0.1:8000/v1"   # a vLLM server
    model = "Qwen/Qwen3-4B"
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import ConfigDict, Field, SecretStr, model_validator
from rollhub.errors import TokenRetrievalError, UsageError
from rollhub.tokens import CaptureSession, TokenSource, TokenSourceOptions
from rollhub.trace import TraceRecord

from rollhub_rllm.traces import answered, stitch

if TYPE_CHECKING:
    from rollhub_rllm.gateway_process import GatewayProcess
    from rollhub_rllm.relay import SessionRelay

__all__ = ["RllmSourceOptions", "RllmTokenSource"]

log = logging.getLogger(__name__)

#: session ids rllm-model-gateway 0.1.0 routes as they are (its routes take no '/')
_PLAIN_SID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._~:@+=-]{0,199}$")


class RllmSourceOptions(TokenSourceOptions):
    """``[token_source]`` options of the ``rllm`` token source."""

    model_config = ConfigDict(extra="forbid")

    engine_url: str | None = Field(
        None, description="OpenAI-compatible engine (http://host:port/v1) to start a gateway for"
    )
    url: str | None = Field(
        None, description="root URL of a running rllm-model-gateway to attach to instead"
    )
    model: str | None = Field(None, description="model name agents send to the engine")
    api_key: SecretStr | None = Field(
        None, description="the engine's API key, handed to agents (the gateway forwards it)"
    )
    host: str = Field("127.0.0.1", description="address of the gateway and the agents' relay")
    port: int = Field(0, ge=0, le=65535, description="gateway port (0: a free one)")
    store: Literal["sqlite", "memory"] = Field("sqlite", description="the gateway's trace store")
    sync_traces: bool = Field(
        True, description="ask a started gateway to store non-streamed traces before replying"
    )
    health_check_interval_s: float = Field(
        10.0, gt=0, description="how often the gateway probes the engine's /health"
    )
    data_dir: str | None = Field(None, description="gateway data directory (default: a temp dir)")
    startup_timeout_s: float = Field(30.0, gt=0, description="deadline for the gateway to start")
    trace_wait_s: float = Field(
        10.0, gt=0, description="deadline for a session's last traces to be written"
    )
    request_timeout_s: float = Field(30.0, gt=0, description="timeout of calls to the gateway")

    @model_validator(mode="after")
    def _one_gateway(self) -> RllmSourceOptions:
        if bool(self.engine_url) == bool(self.url):
            raise ValueError(
                "set exactly one of token_source.engine_url (start rllm-model-gateway in front "
                "of that engine) and token_source.url (attach to a running gateway)"
            )
        return self


class RllmTokenSource(TokenSource):
    """Token source backed by ``rllm-model-gateway`` (started here, or attached to)."""

    name = "rllm"
    Options = RllmSourceOptions
    options: RllmSourceOptions

    def __init__(
        self,
        options: RllmSourceOptions | None = None,
        *,
        base_dir: str | Path | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(options, **kwargs)
        data_dir = self.options.data_dir
        if base_dir is not None and data_dir and not Path(data_dir).expanduser().is_absolute():
            # relative paths in rollhub.toml are relative to the config file
            self.options = self.options.model_copy(
                update={"data_dir": str(Path(base_dir) / data_dir)}
            )
        self.process: GatewayProcess | None = None
        self.relay: SessionRelay | None = None
        self._http: httpx.AsyncClient | None = None
        self._gateway: str | None = None
        #: rollhub session id → (gateway session id, weight version at open)
        self._open: dict[str, tuple[str, int | None]] = {}
        #: reads done, reads that had to wait for late traces, and seconds spent waiting
        self.stats: dict[str, float] = {"reads": 0, "late_reads": 0, "wait_s": 0.0}

    @property
    def gateway_url(self) -> str | None:
        """Root URL of the rllm-model-gateway once started."""
        return self._gateway

    async def start(self) -> None:
        """Start (or attach to) the gateway, then the agents' relay. Idempotent."""
        if self._gateway is not None:
            return
        # aiohttp and the child-process code load only when a source starts
        from rollhub_rllm.gateway_process import GatewayProcess, GatewaySettings
        from rollhub_rllm.relay import SessionRelay

        o = self.options
        # a gateway started here is on loopback: no proxy from the environment applies
        self._http = httpx.AsyncClient(timeout=o.request_timeout_s, trust_env=bool(o.url))
        try:
            if o.url:
                root = o.url.rstrip("/")
                await self._call("GET", f"{root}/health", what="probing the gateway")
            else:
                assert o.engine_url is not None
                self.process = GatewayProcess(
                    GatewaySettings(
                        engine_url=o.engine_url,
                        host=o.host,
                        port=o.port,
                        store=o.store,
                        sync_traces=o.sync_traces,
                        health_check_interval_s=o.health_check_interval_s,
                        startup_timeout_s=o.startup_timeout_s,
                        data_dir=o.data_dir,
                    )
                )
                root = await self.process.start()
            self.relay = SessionRelay(root, host=o.host)
            await self.relay.start()
        except BaseException:
            await self.close()
            raise
        self._gateway = root

    async def open_session(
        self, session_id: str, *, sampling: dict[str, Any] | None = None
    ) -> CaptureSession:
        """Open a gateway session; agents get ``{relay}/sessions/{sid}/v1``.

        ``sampling`` is left to the agent's own requests (gateway 0.1.0 keeps no
        per-session sampling parameters).
        """
        root, relay = self._require()
        gsid = gateway_session_id(session_id)
        await self._call(
            "POST", f"{root}/sessions", json={"session_id": gsid,
                                              "metadata": {"rollhub_session_id": session_id}},
            what=f"opening session {session_id!r}",
        )  # fmt: skip
        relay.open(gsid)
        self._open[session_id] = (gsid, self.weight_version)
        key = self.options.api_key.get_secret_value() if self.options.api_key else "rllm"
        return CaptureSession(
            session_id=session_id,
            base_url=f"{relay.url}/sessions/{gsid}/v1",
            api_key=key,
            model_id=self.options.model,
            extra={"rllm_session_id": gsid, "rllm_gateway_url": root},
        )

    async def fetch_traces(self, session_id: str) -> list[TraceRecord]:
        """Every answered call of the session, stitched into records; never a partial read.

        :raises TokenRetrievalError: a call is still in flight or its trace did not arrive
            within ``trace_wait_s``, or a trace lacks token ids.
        """
        root, relay = self._require()
        gsid, version = self._session(session_id)
        calls = relay.calls(gsid)
        wait_s = self.options.trace_wait_s
        began = time.monotonic()
        deadline = began + wait_s
        delay = 0.005
        polls = 0
        while True:
            polls += 1
            traces: list[dict[str, Any]] = []
            if calls.in_flight == 0:
                traces = (await self._call(
                    "GET", f"{root}/sessions/{gsid}/traces", what=f"reading session {session_id!r}"
                )).json()
                if sum(1 for t in traces if answered(t)) >= calls.answered:
                    break
            left = deadline - time.monotonic()
            if left <= 0:
                got = sum(1 for t in traces if answered(t))
                raise TokenRetrievalError(
                    _incomplete(session_id, calls.answered, got, calls.in_flight, wait_s),
                    session_id=session_id,
                    expected=calls.answered,
                    got=got,
                )
            # a finishing call wakes us at once; a late trace write is polled for
            waiter = asyncio.ensure_future(calls.changed.wait())
            try:
                await asyncio.wait({waiter}, timeout=min(delay, left))
            finally:
                waiter.cancel()
            delay = min(delay * 2, 0.2)
        self.stats["reads"] += 1
        if polls > 1:
            self.stats["late_reads"] += 1
            self.stats["wait_s"] += time.monotonic() - began
        traces.sort(key=lambda t: t.get("timestamp") or 0.0)
        return stitch(session_id, traces, weight_version=version)

    async def close_session(self, session_id: str, *, drop: bool = False) -> None:
        """Delete the session and its traces from the gateway. Unknown ids are ignored."""
        root, relay = self._require()
        entry = self._open.pop(session_id, None)
        if entry is None:
            return
        relay.close(entry[0])
        await self._call(
            "DELETE", f"{root}/sessions/{entry[0]}", what=f"deleting session {session_id!r}"
        )

    async def close(self) -> None:
        """Stop the relay and the gateway this source started. Idempotent."""
        if self.relay is not None:
            await self.relay.stop()
            self.relay = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self.process is not None:
            await self.process.stop()
            self.process = None
        self._gateway = None
        self._open.clear()

    # Internals ------------------------------------------------------------------------------

    def _require(self) -> tuple[str, SessionRelay]:
        if self._gateway is None or self.relay is None:
            raise UsageError("the rllm token source is not started; await source.start() first")
        return self._gateway, self.relay

    def _session(self, session_id: str) -> tuple[str, int | None]:
        entry = self._open.get(session_id)
        if entry is None:
            raise TokenRetrievalError(
                f"capture session {session_id!r} is not open in the rllm token source",
                session_id=session_id,
            )
        return entry

    async def _call(self, method: str, url: str, *, what: str,
                    json: object = None) -> httpx.Response:
        assert self._http is not None
        try:
            resp = await self._http.request(method, url, json=json)
        except httpx.HTTPError as exc:
            raise TokenRetrievalError(
                f"{what}: rllm-model-gateway at {url} unreachable: {type(exc).__name__}: {exc}"
            ) from exc
        if resp.status_code >= 400:
            raise TokenRetrievalError(
                f"{what}: rllm-model-gateway answered {resp.status_code} to {method} {url}: "
                f"{resp.text[:300]}",
                status=resp.status_code,
            )
        return resp


def gateway_session_id(session_id: str) -> str:
    """The gateway-side id of a session: itself when its routes accept it, else a digest."""
    if _PLAIN_SID.match(session_id):
        return session_id
    return "rh-" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def _incomplete(sid: str, expected: int, got: int, in_flight: int, wait_s: float) -> str:
    if in_flight:
        return (
            f"session {sid!r}: {in_flight} model call(s) still in flight after {wait_s:g}s; "
            f"the agent returned before its calls ended (await every model call), or raise "
            f"token_source.trace_wait_s"
        )
    return (
        f"session {sid!r}: the agent got {expected} answered model call(s) but "
        f"rllm-model-gateway holds {got} trace(s) after {wait_s:g}s (its trace writes are "
        f"asynchronous); the episode is failed rather than returned incomplete. Check the "
        f"gateway log, or raise token_source.trace_wait_s"
    )

"""verl's own rollout servers as the gateway's sampling backend (``engine.name = "verl"``).

Inside a verl agent-loop worker the gateway samples through the worker's server client
(``verl.workers.rollout.llm_server.LLMServerClient``), token ids in and out::

    await client.generate(request_id, prompt_ids=[...], sampling_params={...})
        -> TokenOutput(token_ids, log_probs, stop_reason, num_preempted, extra_fields)

- ``request_id`` is the capture session id: verl's load balancer keys sticky routing on it,
  so every turn of one episode reaches the replica that holds its prefix cache.
- ``sampling_params`` carries ``max_tokens``, ``logprobs=True`` and the sampling fields. When
  the agent loop registered verl's own sampling parameters for the session (training or
  validation settings, greedy rows), their ``temperature``/``top_p``/``top_k``/
  ``repetition_penalty`` win over the agent's, as in verl's built-in loops.
- ``extra_fields["global_steps"]`` (set by verl's vLLM and SGLang servers to the step whose
  weights they hold) becomes :attr:`Generation.weight_version`, so each turn records the
  policy version that really sampled it. ``stop_reason`` ``aborted`` is ``abort``; a
  completed generation that used its whole ``max_tokens`` is ``length``.

The client object lives in the worker process, so it is bound at run time
(:func:`bind_server`) by the agent loop rather than named in config.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from rollhub.errors import GatewayError
from rollhub.sampling import (
    Generation,
    SamplingBackend,
    SamplingBackendOptions,
    SamplingParams,
    TurnContext,
)

from rollhub_verl.verl_types import ServerClient, TokenOutput

log = logging.getLogger(__name__)

__all__ = ["ServerBinding", "VerlServerBackend", "bind_server", "binding"]

#: sampling keys of verl's per-call parameters that override the agent's
VERL_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass
class ServerBinding:
    """The worker's verl server client and verl's sampling parameters per open session."""

    server: ServerClient | None = None
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)


_BINDING = ServerBinding()


def binding() -> ServerBinding:
    """The process-wide binding (one verl agent-loop worker per process)."""
    return _BINDING


def bind_server(server: ServerClient) -> None:
    """Make ``server`` (verl's ``LLMServerClient``) the one the ``verl`` backend calls."""
    if _BINDING.server is not None and _BINDING.server is not server:
        log.debug("verl server client rebound in this process")
    _BINDING.server = server


class VerlServerBackend(SamplingBackend):
    """Samples through verl's ``LLMServerClient.generate`` (see the module docstring)."""

    name = "verl"
    Options = SamplingBackendOptions

    def __init__(
        self, options: SamplingBackendOptions | None = None, *, server: ServerClient | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(options, **kwargs)
        self._server = server

    @property
    def server(self) -> ServerClient:
        """The given client, else the one the agent loop bound in this process."""
        server = self._server if self._server is not None else _BINDING.server
        if server is None:
            raise GatewayError(
                "the verl sampling backend has no verl server client: it only runs inside a "
                "verl agent-loop worker (engine.name = 'verl' with [trainer] name = 'verl', "
                "launched by 'rollhub verl'); elsewhere choose engine vllm or sglang",
                engine=self.name,
                unreachable=True,
                status=None,
            )
        return server

    def sampling_params(self, params: SamplingParams, turn: TurnContext | None) -> dict[str, Any]:
        """verl's ``sampling_params`` dict for one call (vLLM/SGLang keys)."""
        out: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "logprobs": True,
        }
        if params.seed is not None:
            out["seed"] = params.seed
        if params.stop_token_ids:
            out["stop_token_ids"] = list(params.stop_token_ids)
        if params.stop:
            out["stop"] = list(params.stop)
        out.update(params.extra)
        verl = _BINDING.sessions.get(turn.session_id) if turn is not None else None
        for key in VERL_SAMPLING_KEYS:
            if verl and key in verl:
                out[key] = verl[key]
        return out

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """One ``LLMServerClient.generate`` call keyed by the session id."""
        server = self.server
        request_id = turn.session_id if turn is not None else uuid.uuid4().hex
        sampling = self.sampling_params(params, turn)
        verl = _BINDING.sessions.get(turn.session_id) if turn is not None else None
        # the row's scheduling priority (verl passes it to vLLM; other servers ignore it)
        extra = {"priority": int(verl["priority"])} if verl and "priority" in verl else {}
        try:
            output = await server.generate(
                request_id, prompt_ids=list(prompt_ids), sampling_params=sampling, **extra
            )
        except GatewayError:
            raise
        except Exception as exc:
            raise GatewayError(
                f"verl server generate failed for session {request_id!r}: "
                f"{type(exc).__name__}: {exc}",
                engine=self.name,
                unreachable=False,
                status=None,
            ) from exc
        return to_generation(output, max_tokens=params.max_tokens)


def to_generation(output: TokenOutput, *, max_tokens: int) -> Generation:
    """A :class:`Generation` from verl's ``TokenOutput``.

    :raises GatewayError: the server returned no logprobs for its tokens (they are what the
        trainer's importance ratio needs) or a non-finite one.
    """
    ids = [int(t) for t in output.token_ids]
    logprobs = output.log_probs
    if ids and (logprobs is None or len(logprobs) != len(ids)):
        raise GatewayError(
            f"verl server returned {len(ids)} tokens but "
            f"{'no' if logprobs is None else len(logprobs)} logprobs; the rollout config must "
            f"allow logprobs (actor_rollout_ref.rollout.calculate_log_probs)",
            engine="verl",
        )
    lps = [float(x) for x in (logprobs or [])]
    if not all(math.isfinite(x) for x in lps):
        raise GatewayError("verl server returned a non-finite logprob", engine="verl")
    stop = output.stop_reason
    if stop == "aborted":
        finish = "abort"
    elif len(ids) >= max_tokens:
        finish = "length"
    else:
        finish = "stop"
    extra = dict(output.extra_fields or {})
    version = extra.get("global_steps", extra.get("max_global_steps"))
    metrics: dict[str, Any] = {}
    if output.num_preempted is not None:
        metrics["num_preempted"] = output.num_preempted
    if extra.get("num_cached_tokens") is not None:
        metrics["cached_tokens"] = extra["num_cached_tokens"]
    return Generation(
        ids,
        lps,
        finish,
        weight_version=int(version) if version is not None and int(version) >= 0 else None,
        metrics=metrics,
    )

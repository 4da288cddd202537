"""Planning one model call: the served policy picked by the model name it sends, the
session's policy checked, the prompt rendered, the sampling parameters resolved, the weight
version current at the turn's start read. Errors here are 400s or 429s, before anything is
sampled; :mod:`rollhub_gateway.model_call.runner` samples the plan.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rollhub.errors import GatewayError
from rollhub.sampling import SamplingParams, TurnContext
from rollhub.seeding import turn_seed

from rollhub_gateway.config import SessionPolicy
from rollhub_gateway.policies.routes import PolicyRoute, PolicyRoutes
from rollhub_gateway.protocols.base import RequestedSampling, WireError, WireRequest
from rollhub_gateway.sessions import Session
from rollhub_gateway.turns import ChatModel, PreparedTurn

__all__ = ["TurnPlan", "TurnPlanner", "resolve_sampling"]

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class TurnPlan:
    """A model call that passed policy and is rendered, ready to sample."""

    session: Session
    request: WireRequest
    prepared: PreparedTurn
    params: SamplingParams
    route: str
    t0: float
    #: the call as the backend sees it; its version is the one current when the turn started
    turn: TurnContext
    #: the policy that samples it (None: the runner's own backend)
    policy: PolicyRoute | None = None


def resolve_sampling(
    req: RequestedSampling,
    policy: SessionPolicy,
    *,
    stop_token_ids: list[int],
    prompt_len: int,
    context_window: int | None = None,
) -> SamplingParams:
    """Engine parameters from the agent's fields and the session policy.

    The agent's value applies unless the policy pins the field; ``max_tokens`` is clipped
    to ``max_tokens_cap`` and to the context left under ``max_context_tokens`` (the
    policy's, else the model's ``context_window``).

    :raises WireError: the prompt alone fills ``max_context_tokens`` (400, ``messages``).
    """
    pinned = set(policy.pinned)

    def pick(name: str, agent: T | None, default: T) -> T:
        return default if agent is None or name in pinned else agent

    max_tokens = pick("max_tokens", req.max_tokens, policy.max_tokens)
    if policy.max_tokens_cap is not None:
        max_tokens = min(max_tokens, policy.max_tokens_cap)
    limit = policy.max_context_tokens or context_window
    if limit is not None:
        room = limit - prompt_len
        if room <= 0:
            whose = "session's" if policy.max_context_tokens else "model's context window,"
            raise WireError(
                "invalid_request",
                f"prompt has {prompt_len} tokens, which fills the {whose} "
                f"max_context_tokens={limit}; shorten the messages",
                param="messages",
            )
        max_tokens = min(max_tokens, room)
    stop = pick("stop", req.stop, ())
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=pick("temperature", req.temperature, policy.temperature),
        top_p=pick("top_p", req.top_p, policy.top_p),
        top_k=pick("top_k", req.top_k, policy.top_k),
        seed=pick("seed", req.seed, policy.seed),
        stop_token_ids=tuple(stop_token_ids),
        stop=tuple(stop or ()),
    )


class TurnPlanner:
    """Plans the model calls of one chat model.

    :param weight_version: the policy version current now (read when a turn starts).
    :param routes: the policies served (None: one, whatever model name a call sends).
    """

    def __init__(
        self,
        chat_model: ChatModel,
        *,
        weight_version: Callable[[], int | None],
        routes: PolicyRoutes | None = None,
    ) -> None:
        self.chat_model = chat_model
        self.weight_version = weight_version
        self._stop_ids = list(chat_model.stop_token_ids())
        self.routes = routes

    def plan(self, session: Session, request: WireRequest, *, route: str) -> TurnPlan:
        """Check policy and render the prompt.

        :raises WireError: 400 for a model name no served policy has, a policy limit or a
            turn the template cannot render; 429 when the session has too many calls in
            flight.
        """
        served = self._served(request)
        policy = session.policy
        if session.in_flight >= policy.max_concurrent_requests:
            raise WireError(
                "rate_limit",
                f"session {session.session_id!r} already has {session.in_flight} calls in "
                f"flight (max_concurrent_requests={policy.max_concurrent_requests})",
            )
        if policy.max_turns is not None and session.turns + session.in_flight >= policy.max_turns:
            raise WireError(
                "invalid_request",
                f"session {session.session_id!r} reached its limit of max_turns={policy.max_turns} model calls",
                param="messages",
            )
        if request.turn.tools and not self.chat_model.supports_tools():
            raise WireError(
                "invalid_request",
                f"model {self.chat_model.model_id!r} (family {self.chat_model.family!r}) cannot "
                "render tools; set the gateway's chat_template or family override",
                param="tools",
            )
        t0 = time.perf_counter()
        turn = request.turn
        if served is not None and served.name is not None:
            turn = dataclasses.replace(turn, policy=served.name)
        try:
            prepared = session.conversation.prepare(turn)
        except GatewayError as exc:
            raise WireError("invalid_request", str(exc), param="messages") from exc
        params = resolve_sampling(
            request.sampling,
            policy,
            stop_token_ids=self._stop_ids,
            prompt_len=len(prepared.prompt_ids),
            context_window=getattr(self.chat_model, "context_window", None),
        )
        from_policy = request.sampling.seed is None or "seed" in policy.pinned
        if params.seed is not None and from_policy:
            # the session's seed (a run's [experiment] seed): each turn its own draw, the
            # same in every run; a seed the agent sent is the agent's and used as it is
            params = dataclasses.replace(params, seed=turn_seed(params.seed, prepared.turn_index))
        top = request.options.get("top_logprobs") or 0
        if top:
            # engines that can report alternatives read this (vLLM, SGLang); others ignore it
            params = dataclasses.replace(params, extra={**params.extra, "top_logprobs": top})
        version = (self.routes.version(served) if self.routes is not None and served is not None
                   else self.weight_version())
        context = TurnContext(session.session_id, prepared.turn_index, version)
        return TurnPlan(session, request, prepared, params, route, t0, context, served)

    def _served(self, request: WireRequest) -> PolicyRoute | None:
        return self.routes.for_model(request.model) if self.routes is not None else None

"""Running one model call: policy, rendering, sampling, parsing, commit.

:meth:`TurnRunner.plan` checks the session's policy and renders the prompt (errors here are
400s, before anything is sampled). :meth:`TurnRunner.complete` samples the whole output;
:class:`TurnStream` streams it. Both commit the turn to the session's conversation *before*
the caller sees the end of the response, so reading traces right after the agent's last
reply never misses a turn.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from rollhub.errors import GatewayError
from rollhub.sampling import Generation, SamplingBackend, SamplingParams, TokenChunk, TurnContext

from rollhub_gateway.config import SessionPolicy
from rollhub_gateway.metrics import GatewayMetrics, TurnLog
from rollhub_gateway.protocols.base import RequestedSampling, TurnResult, WireError, WireRequest
from rollhub_gateway.protocols.logprob_texts import token_texts, top_logprobs
from rollhub_gateway.sessions import Session
from rollhub_gateway.stop_sequences import StopHoldback, cut_at_stop
from rollhub_gateway.turns import ChatModel, OutputDelta, PreparedTurn, StreamingParser

__all__ = [
    "ClientGone",
    "Finished",
    "Started",
    "TurnPlan",
    "TurnRunner",
    "TurnStream",
    "resolve_sampling",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Started:
    """The stream has begun: prompt size and turn index are known."""

    prompt_tokens: int
    turn_index: int
    model_id: str
    #: the prompt's token ids as the engine received them
    prompt_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Finished:
    """The turn is committed; the result is final."""

    result: TurnResult


StreamEvent = Started | OutputDelta | Finished


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

    def pick(name: str, agent: Any, default: Any) -> Any:
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


class TurnRunner:
    """Executes model calls of any protocol against one backend and chat model."""

    def __init__(
        self,
        backend: SamplingBackend,
        chat_model: ChatModel,
        metrics: GatewayMetrics,
        *,
        weight_version: Callable[[], int | None],
        log_turns: bool = True,
    ) -> None:
        self.backend = backend
        self.chat_model = chat_model
        self.metrics = metrics
        self.weight_version = weight_version
        self.log_turns = log_turns
        self._stop_ids = list(chat_model.stop_token_ids())

    def plan(self, session: Session, request: WireRequest, *, route: str) -> TurnPlan:
        """Check policy and render the prompt.

        :raises WireError: 400 for a policy limit or a turn the template cannot render;
            429 when the session has too many calls in flight.
        """
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
        try:
            prepared = session.conversation.prepare(request.turn)
        except GatewayError as exc:
            raise WireError("invalid_request", str(exc), param="messages") from exc
        params = resolve_sampling(
            request.sampling,
            policy,
            stop_token_ids=self._stop_ids,
            prompt_len=len(prepared.prompt_ids),
            context_window=getattr(self.chat_model, "context_window", None),
        )
        top = request.options.get("top_logprobs") or 0
        if top:
            # engines that can report alternatives read this (vLLM, SGLang); others ignore it
            params = dataclasses.replace(params, extra={**params.extra, "top_logprobs": top})
        turn = TurnContext(session.session_id, prepared.turn_index, self.weight_version())
        return TurnPlan(session, request, prepared, params, route, t0, turn)

    async def complete(self, plan: TurnPlan) -> TurnResult:
        """Sample the whole output, parse it, commit it.

        :raises WireError: 502 when the engine fails.
        """
        plan.session.in_flight += 1
        try:
            t_engine = time.perf_counter()
            try:
                gen = await self.backend.generate(
                    plan.prepared.prompt_ids, plan.params, turn=plan.turn
                )
            except Exception as exc:
                raise self._engine_error(exc) from exc
            engine_ms = (time.perf_counter() - t_engine) * 1000
            parser = self.chat_model.new_parser(plan.prepared)
            parser.feed(list(gen.token_ids))
            return self._commit(plan, parser, gen, engine_ms)
        finally:
            plan.session.in_flight -= 1
            plan.session.touch()

    def stream(self, plan: TurnPlan) -> TurnStream:
        """A stream of this call's output (call :meth:`TurnStream.start` first)."""
        return TurnStream(self, plan)

    def _engine_error(self, exc: BaseException) -> WireError:
        self.metrics.engine_error()
        log.warning("engine %s failed: %s: %s", self.backend.name, type(exc).__name__, exc)
        return WireError("engine", f"sampling backend {self.backend.name!r} failed: {exc}")

    def _commit(
        self, plan: TurnPlan, parser: StreamingParser, gen: Generation, engine_ms: float
    ) -> TurnResult:
        parsed, stop_sequence = parser.finish(), None
        if gen.finish_reason == "stop" and plan.params.stop:
            # the ids keep the stop string (they were sampled); the message does not
            parsed, stop_sequence = cut_at_stop(parsed, plan.params.stop)
        # the backend knows which weights sampled; else the version when the turn started,
        # so a weight update while this turn sampled does not relabel it
        version = gen.weight_version if gen.weight_version is not None else plan.turn.weight_version
        try:
            drift = plan.session.conversation.commit(
                plan.prepared, gen, parsed, weight_version=version
            )
        except GatewayError as exc:  # e.g. ids and logprobs of different lengths
            raise self._engine_error(exc) from exc
        plan.session.turns += 1
        opts = plan.request.options
        result = TurnResult(
            parsed=parsed,
            generation=gen,
            prompt_tokens=len(plan.prepared.prompt_ids),
            model_id=self.chat_model.model_id,
            turn_index=plan.prepared.turn_index,
            token_texts=token_texts(self.chat_model, gen) if opts.get("logprobs") else None,
            top_logprobs=top_logprobs(self.chat_model, gen, opts.get("top_logprobs") or 0),
            prompt_ids=plan.prepared.prompt_ids,
            stop_sequence=stop_sequence,
        )
        self.metrics.turn(
            TurnLog(
                session_id=plan.session.session_id,
                turn=plan.prepared.turn_index,
                route=plan.route,
                prompt_tokens=result.prompt_tokens,
                output_tokens=result.completion_tokens,
                latency_ms=round((time.perf_counter() - plan.t0) * 1000, 3),
                engine_ms=round(engine_ms, 3),
                finish_reason=result.finish_reason,
                drift=drift or plan.prepared.drift,
                stream=plan.request.stream,
                weight_version=version,
            ),
            log_line=self.log_turns,
        )
        return result


class ClientGone(ConnectionResetError):
    """The caller disconnected before the streamed turn ended."""


class TurnStream:
    """One streamed call: engine chunks → safe text deltas → commit → :class:`Finished`.

    :meth:`start` pulls the engine's first chunk, so an engine that fails at once is still
    a plain 502 response. :meth:`aclose` (also on client disconnect) closes the engine
    stream, which aborts the engine request.
    """

    def __init__(self, runner: TurnRunner, plan: TurnPlan) -> None:
        self.runner = runner
        self.plan = plan
        self._agen: Any = runner.backend.stream(
            plan.prepared.prompt_ids, plan.params, turn=plan.turn
        )
        self._first: TokenChunk | Generation | None = None
        self._t_engine = 0.0
        self._done = False
        self._counted = False

    async def start(self) -> None:
        """Start sampling and wait for the first chunk.

        :raises WireError: 502 when the engine fails before producing anything.
        """
        self.plan.session.in_flight += 1
        self._counted = True
        self._t_engine = time.perf_counter()
        try:
            self._first = await self._agen.__anext__()
        except StopAsyncIteration as exc:
            await self.aclose()
            raise self.runner._engine_error(RuntimeError("stream ended without output")) from exc
        except Exception as exc:
            await self.aclose()
            raise self.runner._engine_error(exc) from exc

    async def events(
        self, is_closed: Callable[[], bool] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Started, then text deltas as they become safe, then Finished after the commit.

        :param is_closed: polled after each engine chunk; when it turns true the client is
            gone and the stream stops (:class:`ClientGone`) without committing.
        :raises WireError: 502 when the engine fails mid-stream.
        """
        plan = self.plan
        parser = self.runner.chat_model.new_parser(plan.prepared)
        yield Started(
            len(plan.prepared.prompt_ids),
            plan.prepared.turn_index,
            self.runner.chat_model.model_id,
            plan.prepared.prompt_ids,
        )
        gen: Generation | None = None
        item = self._first
        holdback = StopHoldback(plan.params.stop)
        try:
            while item is not None:
                if isinstance(item, Generation):
                    gen = item
                    break
                for delta in parser.feed(list(item.token_ids)):
                    safe = holdback.feed(delta)
                    if safe is not None:
                        yield safe
                if is_closed is not None and is_closed():
                    raise ClientGone("client disconnected during generation")
                item = await self._agen.__anext__()
        except StopAsyncIteration:
            pass
        except (WireError, ClientGone):
            raise
        except Exception as exc:
            raise self.runner._engine_error(exc) from exc
        if gen is None:
            raise self.runner._engine_error(RuntimeError("stream ended without a final generation"))
        self._done = True
        engine_ms = (time.perf_counter() - self._t_engine) * 1000
        result = self.runner._commit(plan, parser, gen, engine_ms)
        yield Finished(result)

    async def aclose(self) -> None:
        """Close the engine stream (aborting it if unfinished) and release the session slot."""
        if self._counted:
            self._counted = False
            self.plan.session.in_flight -= 1
            self.plan.session.touch()
            if not self._done:
                self.runner.metrics.stream_aborted()
        await self._agen.aclose()

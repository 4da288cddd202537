"""Running one planned model call: sampling, parsing, commit.

:meth:`TurnRunner.complete` samples the whole output; :class:`TurnStream` streams it. Both
commit the turn to the session's conversation *before* the caller sees the end of the
response, so reading traces right after the agent's last reply never misses a turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from rollhub.errors import GatewayError
from rollhub.sampling import Generation, SamplingBackend, TokenChunk

from rollhub_gateway.metrics import GatewayMetrics, TurnLog
from rollhub_gateway.model_call.plan import TurnPlan
from rollhub_gateway.protocols.base import Finished, Started, StreamEvent, TurnResult, WireError
from rollhub_gateway.protocols.logprob_texts import token_texts, top_logprobs
from rollhub_gateway.stop_sequences import StopHoldback, cut_at_stop
from rollhub_gateway.trajectory.record import stamped_version
from rollhub_gateway.turns import ChatModel, StreamingParser

if TYPE_CHECKING:
    from rollhub_gateway.sessions import Session

__all__ = ["ClientGone", "TurnRunner", "TurnStream"]

log = logging.getLogger(__name__)


class TurnRunner:
    """Samples planned model calls of any protocol against one backend and chat model."""

    def __init__(
        self,
        backend: SamplingBackend,
        chat_model: ChatModel,
        metrics: GatewayMetrics,
        *,
        log_turns: bool = True,
    ) -> None:
        self.backend = backend
        self.chat_model = chat_model
        self.metrics = metrics
        self.log_turns = log_turns

    async def complete(self, plan: TurnPlan) -> TurnResult:
        """Sample the whole output, parse it, commit it.

        :raises WireError: 502 when the engine fails.
        """
        plan.session.in_flight += 1
        try:
            t_engine = time.perf_counter()
            try:
                gen = await self.backend_of(plan).generate(
                    plan.prepared.prompt_ids, plan.params, turn=plan.turn
                )
            except Exception as exc:
                raise self._engine_error(exc, plan.session) from exc
            engine_ms = (time.perf_counter() - t_engine) * 1000
            parser = self.chat_model.new_parser(plan.prepared)
            parser.feed(list(gen.token_ids))
            return self._commit(plan, parser, gen, engine_ms)
        finally:
            plan.session.in_flight -= 1
            plan.session.last_used = time.monotonic()

    def backend_of(self, plan: TurnPlan) -> SamplingBackend:
        """The backend that samples ``plan``: its policy's, else this runner's."""
        return plan.policy.backend if plan.policy is not None else self.backend

    def model_id_of(self, plan: TurnPlan) -> str:
        """The model name a response of ``plan`` carries: its policy's."""
        return plan.policy.model_id if plan.policy is not None else self.chat_model.model_id

    def stream(self, plan: TurnPlan) -> TurnStream:
        """A stream of this call's output (call :meth:`TurnStream.start` first)."""
        return TurnStream(self, plan)

    def _engine_error(self, exc: BaseException, session: Session) -> WireError:
        """A 502 for the agent; the session keeps the failure, so the hub reading or
        closing it learns the capture is lost to the engine, not to the agent."""
        self.metrics.engine_error()
        log.warning("engine %s failed: %s: %s", self.backend.name, type(exc).__name__, exc)
        message = f"sampling backend {self.backend.name!r} failed: {exc}"
        session.engine_failure = session.engine_failure or message
        return WireError("engine", message)

    def _commit(
        self, plan: TurnPlan, parser: StreamingParser, gen: Generation, engine_ms: float
    ) -> TurnResult:
        parsed, stop_sequence = parser.finish(), None
        if gen.finish_reason == "stop" and plan.params.stop:
            # the ids keep the stop string (they were sampled); the message does not
            parsed, stop_sequence = cut_at_stop(parsed, plan.params.stop)
        version = stamped_version(gen, plan.turn.weight_version)  # as commit stamps it
        try:
            drift = plan.session.conversation.commit(
                plan.prepared, gen, parsed, weight_version=plan.turn.weight_version
            )
        except GatewayError as exc:  # e.g. ids and logprobs of different lengths
            raise self._engine_error(exc, plan.session) from exc
        plan.session.turns += 1
        opts = plan.request.options
        result = TurnResult(
            parsed=parsed,
            generation=gen,
            prompt_tokens=len(plan.prepared.prompt_ids),
            model_id=self.model_id_of(plan),
            turn_index=plan.prepared.turn_index,
            completion_tokens=len(gen.token_ids),
            finish_reason="tool_calls" if parsed.tool_calls else gen.finish_reason,
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
        self._agen: Any = runner.backend_of(plan).stream(
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
            raise self.runner._engine_error(
                RuntimeError("stream ended without output"), self.plan.session
            ) from exc
        except Exception as exc:
            await self.aclose()
            raise self.runner._engine_error(exc, self.plan.session) from exc

    async def events(
        self, is_closed: Callable[[], bool] | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
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
            self.runner.model_id_of(plan),
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
            raise self.runner._engine_error(exc, self.plan.session) from exc
        if gen is None:
            raise self.runner._engine_error(
                RuntimeError("stream ended without a final generation"), self.plan.session
            )
        self._done = True
        engine_ms = (time.perf_counter() - self._t_engine) * 1000
        result = self.runner._commit(plan, parser, gen, engine_ms)
        yield Finished(result)

    async def aclose(self) -> None:
        """Close the engine stream (aborting it if unfinished) and release the session slot."""
        if self._counted:
            self._counted = False
            self.plan.session.in_flight -= 1
            self.plan.session.last_used = time.monotonic()
            if not self._done:
                self.runner.metrics.stream_aborted()
        await self._agen.aclose()

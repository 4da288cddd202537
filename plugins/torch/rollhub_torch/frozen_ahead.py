"""The frozen layers' forward of a step's responses, run while the step is still sampling.

The trainer trains the top ``train_layers`` decoder layers; the embeddings and the layers
below never change during a run. What they compute for a response, the hidden state each
of its tokens enters the first trained layer with, depends on the tokens alone, so it is
known as soon as the episode ends. That forward is 28-29% of a main-job training step's
linear-layer work (~2.5 s of its ~10), and during sampling one of the two cores is idle:
the engine decodes on one thread and the gateway and the agents take 1-5% of the other.

:class:`FrozenAhead` forwards each finished episode's responses through the frozen layers
on a thread of its own, as the training loop hands the episode over
(:meth:`~rollhub.training.PolicyTrainer.prepare`), and keeps the results by content. The
prompts' frozen states are forwarded once each, on a start the run's prompts share (a
system prompt, the tools), which is forwarded once a run. The step runs only the trained
layers on the responses it finds, and forwards the others (those of episodes that ended
as the step began) through the frozen layers itself. The loss, the gradients and the
step's metrics are those of the whole forward up to rounding (~1e-10 on the gradients:
the step's frozen states of a prompt are forwarded in its own order, a response ahead
alone rather than in its padded part).

:func:`first_trained_layer` says where the model splits: below the first trained layer,
everything (the embeddings included) is frozen. :func:`split_matches` checks once, at
load, that the two halves compose to what the model's own forward computes:
:func:`~rollhub_torch.decoder_slice.forward_layers` calls the decoder's parts as the
Hugging Face forward of this ``transformers`` version does, and a version that calls them
otherwise turns the forward ahead off rather than train on something else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rollhub.training.fitting import fit_records
from rollhub_gateway.engines.cpu_threads import set_thread_count

from rollhub_torch.decoder_slice import forward_layers
from rollhub_torch.prompt_forward import PromptForward
from rollhub_torch.sequences import PromptGroup, Response, response_tensors, shared_prefix

if TYPE_CHECKING:
    import torch
    from rollhub.episode import Episode
    from transformers import PreTrainedModel

__all__ = ["FrozenAhead", "first_trained_layer", "frozen_rows", "row_key", "split_matches"]

log = logging.getLogger(__name__)

#: threads of the forward ahead: the core the engine leaves while it decodes
AHEAD_THREADS = 1

RowKey = tuple[tuple[int, ...], tuple[int, ...]]


def row_key(prompt_ids: tuple[int, ...], response: Response) -> RowKey:
    """What a response's frozen forward depends on: its prompt and its tokens."""
    return prompt_ids, tuple(response.token_ids)


def first_trained_layer(model: PreTrainedModel) -> int | None:
    """The index of the lowest decoder layer with a trained parameter, where the input
    embeddings and every layer below it are frozen and there is at least one such layer;
    otherwise None (nothing to forward ahead)."""
    decoder = model.get_decoder()
    if any(p.requires_grad for p in decoder.embed_tokens.parameters()):
        return None
    for i, layer in enumerate(decoder.layers):
        if any(p.requires_grad for p in layer.parameters()):
            return i or None
    return None


def _frozen_prompt(
    model: PreTrainedModel, prompt_ids: tuple[int, ...], first: int, cache_kw: str,
    start: Sequence[tuple[torch.Tensor, torch.Tensor]] = (),
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The frozen layers' keys and values of ``prompt_ids``, the first of them taken from
    ``start`` (the states of a prompt it begins with, cut to that length)."""
    import torch
    from transformers import DynamicCache

    done = start[0][0].shape[2] if start else 0
    decoder = model.get_decoder()
    cache = DynamicCache(ddp_cache_data=list(start)) if start else DynamicCache()
    if done < len(prompt_ids):
        ids = torch.tensor([prompt_ids[done:]], dtype=torch.long)
        forward_layers(
            decoder, decoder.embed_tokens(ids), decoder.layers[:first],
            attention_mask=None, cache=cache, cache_kw=cache_kw,
        )
    layers: Any = cache.layers[:first]
    return [(layer.keys, layer.values) for layer in layers]


def frozen_rows(
    model: PreTrainedModel, prompt: Sequence[tuple[torch.Tensor, torch.Tensor]],
    rows: Sequence[Response], first: int, cache_kw: str,
) -> torch.Tensor:
    """The hidden states ``rows`` enter layer ``first`` with (``[rows, width, hidden]``,
    right-padded as :func:`response_tensors` lays them out), forwarded as a batch on the
    prompt's frozen states ``prompt`` (one row: ``[1, length, hidden]``)."""
    import torch

    from rollhub_torch.recompute import ReplayableCache  # imports torch

    decoder = model.get_decoder()
    ids = response_tensors(PromptGroup((), list(rows)))[0]
    n, length = ids.shape[0], prompt[0][0].shape[2]
    cache = ReplayableCache([(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prompt])
    lengths = torch.tensor([len(r.token_ids) for r in rows])
    valid = torch.arange(ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    mask = torch.cat([torch.ones((n, length), dtype=torch.long), valid.long()], 1)
    return forward_layers(
        decoder, decoder.embed_tokens(ids), decoder.layers[:first],
        attention_mask=mask, cache=cache, cache_kw=cache_kw,
    )


def split_matches(model: PreTrainedModel, first: int, cache_kw: str) -> bool:
    """Whether the frozen layers' forward ahead and the trained layers' forward on it give
    what the model's own forward gives (to 1e-5), on a short prompt and two responses; a
    ``transformers`` version whose decoder forward differs fails here, not in training."""
    import torch

    prompt_ids = tuple(range(11, 30))
    part = PromptGroup(prompt_ids, [
        Response([31, 32, 33, 34, 35], [1] * 5, [0.0] * 5, 1.0, "a"),
        Response([41, 42, 43], [1] * 3, [0.0] * 3, 1.0, "b"),
    ])
    ids, trained = response_tensors(part)[:2]
    try:
        with torch.no_grad():
            prompt = PromptForward.run(model, prompt_ids, cache_kw)
            whole = prompt.token_logprobs(part, ids, trained, 1.0)
            frozen = _frozen_prompt(model, prompt_ids, first, cache_kw)
            ahead = torch.cat([  # a row at a time, as ahead of a step
                _padded(frozen_rows(model, frozen, [r], first, cache_kw)[0], ids.shape[1])
                for r in part.responses
            ])
            split = prompt.token_logprobs(part, ids, trained, 1.0, frozen=(first, ahead))
    except (TypeError, ValueError, RuntimeError, AttributeError) as exc:
        log.info("the frozen layers are not forwarded ahead: the split forward failed (%s)", exc)
        return False
    if not torch.allclose(whole, split, atol=1e-5, rtol=0):
        log.info("the frozen layers are not forwarded ahead: the split forward differs by %.2g",
                 float((whole - split).abs().max()))  # fmt: skip
        return False
    return True


def _padded(row: torch.Tensor, width: int) -> torch.Tensor:
    """A row's ``[length, hidden]`` states as ``[1, width, hidden]``, zeros after it (a
    padded position's state reaches nothing the loss reads: the mask hides it from the
    tokens before it, and its own prediction is not taken)."""
    out = row.new_zeros((1, width, row.shape[-1]))
    out[0, : row.shape[0]] = row
    return out


def _yielding_thread() -> None:
    """The forward ahead's thread: ``AHEAD_THREADS`` torch threads, and the lowest
    scheduling priority (a thread's own on Linux), so the event loop that feeds the engine
    (the gateway, the agents) never waits behind it for a core."""
    set_thread_count(AHEAD_THREADS)
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class FrozenAhead:
    """Forwards finished responses through the frozen layers on a thread of its own, a
    response at a time, and keeps the results (:func:`row_key`) until a step takes them.

    While a step trains (:meth:`pause` to :meth:`resume`) it forwards nothing: the step has
    the cores. Responses handed over then (a run sampling ahead, ``max_staleness > 0``)
    wait for :meth:`resume`.

    :param model: the trainer's model; only its frozen parameters are read.
    :param first: the first trained layer (:func:`first_trained_layer`).
    """

    def __init__(self, model: PreTrainedModel, first: int, cache_kw: str) -> None:
        self.model, self.first, self.cache_kw = model, first, cache_kw
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="frozen-ahead", initializer=_yielding_thread
        )
        self._lock = threading.Lock()
        self._queued: list[tuple[Future[None], int, tuple[int, ...], Response]] = []
        self._waiting: list[tuple[int, tuple[int, ...], Response]] = []
        self._paused = False
        self._pausing = -1  # the step that paused it
        self._prompts: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        # a prompt whose start the run's prompts share (a system prompt, the tools): its
        # frozen states never change, so each later prompt forwards only its own rest
        self._start: tuple[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] | None = None
        self._done: dict[RowKey, list[tuple[int, torch.Tensor]]] = {}  # equal rows: one each
        self.forwarded = self.taken = 0  # responses, since the start

    def submit(self, step: int, prompt_ids: tuple[int, ...], responses: Sequence[Response]) -> None:
        """Queue the frozen forward of ``responses`` to ``prompt_ids`` (of step ``step``)."""
        with self._lock:
            if self._paused:
                self._waiting.extend((step, prompt_ids, r) for r in responses)
                return
            for r in responses:
                job = self._pool.submit(self._forward, step, prompt_ids, r)
                self._queued.append((job, step, prompt_ids, r))

    def submit_episode(self, step: int, episode: Episode, max_length: int | None) -> None:
        """Queue the frozen forward of ``episode``'s records as the step will fit them
        (cut to ``max_length``), before its group's advantages say which are trained."""
        for r in fit_records([(episode, 1.0)], max_length=max_length)[0]:
            response = Response(r.response_ids, r.response_mask, r.response_logprobs, 0.0, "")
            self.submit(step, tuple(r.prompt_ids), [response])

    def _forward(self, step: int, prompt_ids: tuple[int, ...], response: Response) -> None:
        import torch

        with self._lock:
            if self._paused:  # a step started: it forwards its own, a later one's wait
                if step > self._pausing:
                    self._waiting.append((step, prompt_ids, response))
                return
        with torch.no_grad():
            prompt = self._prompts.get(prompt_ids)
            if prompt is None:  # the frozen states of a step's few prompts, kept for its rows
                prompt = self._prompts[prompt_ids] = self._prompt_states(prompt_ids)
            hidden = frozen_rows(self.model, prompt, [response], self.first, self.cache_kw)[0]
        with self._lock:
            self._done.setdefault(row_key(prompt_ids, response), []).append((step, hidden))
            self.forwarded += 1

    def _prompt_states(self, prompt_ids: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        shared = shared_prefix([self._start[0], prompt_ids]) if self._start is not None else ()
        if self._start is None or not shared:
            states = _frozen_prompt(self.model, prompt_ids, self.first, self.cache_kw)
            self._start = (prompt_ids, states)
            return states
        start = [(k[:, :, : len(shared)], v[:, :, : len(shared)]) for k, v in self._start[1]]
        return _frozen_prompt(self.model, prompt_ids, self.first, self.cache_kw, start)

    def settle(self) -> None:
        """Wait until every response queued so far is forwarded (a bench or a test that
        wants the results now; a step does not wait, it :meth:`pause` s)."""
        with self._lock:
            queued = list(self._queued)
        for job, *_ in queued:
            job.result()

    def pause(self, step: int) -> None:
        """Step ``step`` starts training: drop its responses still queued (it forwards them
        itself), keep those of later steps for :meth:`resume`, and wait for the one being
        forwarded (a fraction of a second); nothing is forwarded until :meth:`resume`."""
        with self._lock:
            self._paused, self._pausing = True, step
            queued, self._queued = self._queued, []
        for job, of_step, prompt_ids, response in queued:
            if job.cancel():
                if of_step > step:
                    with self._lock:
                        self._waiting.append((of_step, prompt_ids, response))
                continue
            try:
                job.result()
            except Exception:  # the step forwards this response itself
                log.warning("forwarding the frozen layers ahead failed", exc_info=True)
        self._prompts.clear()  # the step's responses are all in: their prompts are done

    def entering(
        self, prompt_ids: tuple[int, ...], rows: Sequence[Response],
        prompt: Sequence[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, int]:
        """What ``rows`` enter the first trained layer with, ``[rows, width, hidden]``: the
        responses forwarded ahead as they were, the others forwarded now as a batch on the
        frozen layers' ``prompt`` states; and how many were forwarded ahead."""
        import torch

        width = max(len(r.token_ids) for r in rows)
        with self._lock:
            found = [self._take(row_key(prompt_ids, r)) for r in rows]
        missing = [r for r, f in zip(rows, found, strict=True) if f is None]
        with torch.no_grad():
            now = iter(frozen_rows(
                self.model, prompt, missing, self.first, self.cache_kw
            ).unbind(0) if missing else ())  # fmt: skip
            out = torch.cat([_padded(f[1] if f is not None else next(now), width) for f in found])
        ahead = len(rows) - len(missing)
        self.taken += ahead
        return out, ahead

    def _take(self, key: RowKey) -> tuple[int, torch.Tensor] | None:
        found = self._done.get(key)
        if not found:
            return None
        first = found.pop(0)
        if not found:
            del self._done[key]
        return first

    def resume(self, step: int) -> None:
        """Step ``step`` is done: forget its responses that were not taken, and forward the
        ones handed over meanwhile."""
        with self._lock:
            kept = {k: [e for e in v if e[0] > step] for k, v in self._done.items()}
            self._done = {k: v for k, v in kept.items() if v}
            self._paused = False
            waiting, self._waiting = self._waiting, []
        for s, prompt_ids, response in waiting:
            self.submit(s, prompt_ids, [response])

    def close(self) -> None:
        """Stop the thread; queued work is dropped."""
        self.pause(step=1 << 62)
        self._pool.shutdown(wait=True, cancel_futures=True)

"""Step-synchronous batching for the embedded transformers engine.

One worker thread owns the model. Every step runs *one* forward pass
(:class:`~.decoder.Decoder`) over a flat list of tokens: the last sampled token of every
decoding row and the prompt chunks of rows joining, so rows join and leave between any two
steps and a joining row costs no extra pass over the weights. Key/value states live in
pre-allocated memory (:mod:`.kv_store`): each step writes one position per row in place.

- **Joining.** A request is looked up in the :class:`~.prefix_cache.PrefixCache`. With a
  hit, the row starts on the hit's shared span, copies the hit's short private tail into
  its slot and forwards only the rest of its prompt there. Identical prompts admitted
  together (a GRPO group), or a prompt with no usable hit, are prefilled once into a new
  span (a :class:`Build`) that every such row then reads; the span is cached, so the
  group's next samples and the sessions' next turns find it. A prompt that shares a long
  prefix with a span still being built waits for that build rather than repeat its work.
- **Leaving.** A finished row's states (span prefix, private tail) go to the prefix cache;
  the last row takes its slot. What a row emits and when it ends is :mod:`.row_output`.
- **Sampling.** Each row draws from its own ``torch.Generator``, so a row's tokens depend
  on its seed, not on which rows share its batch. Tokens reach each caller through a
  callback that hands them to the caller's event loop; the thread never touches an event
  loop itself, so callers on any loop can share it.
- **Weights.** New weights (:meth:`BatchEngine.load_policy`) are taken when the batch is
  empty: rows already decoding finish on the weights they started with, new rows wait,
  and every generation reports the version of the weights that sampled all of it. A
  policy may also be a whole module (a trainer's own model, trained in place): the engine
  then samples from that module itself, and each later version only drops the states of
  the old weights.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from rollhub.errors import GatewayError

from .allocator import release_free_memory
from .batch_sampling import Draw, sample_rows
from .cpu_threads import engine_threads, set_thread_count
from .decoder import Decoder, Pass
from .kv_store import SlotCache, Span
from .policy_tensors import Policy, checked_policy, is_module
from .prefix_cache import PrefixCache, waits_for_prefill
from .row_output import engine_error, final_generation, take_token
from .step_plan import Build, Row, plan_pass
from .token_sampling import LogprobsMode

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)

__all__ = ["BatchEngine", "Row"]

#: prompt tokens forwarded in one step, over every joining row
PREFILL_BUDGET = 512
#: a hit whose private part (tail plus new tokens) is longer is rebuilt as a span
PRIVATE_LIMIT = 256
#: positions per slot before the first growth
SLOT_CAPACITY = 128


class BatchEngine:
    """The worker thread and its batch. Construct with a loaded causal LM."""

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        max_batch_size: int,
        logprobs_mode: LogprobsMode = "sampling",
        threads: int | None = None,
        weight_version: int | None = None,
        prefix_cache_tokens: int = 0,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.threads = threads
        self.weight_version = weight_version
        self.stats: dict[str, float] = {
            "decode_steps": 0,
            "prefills": 0,
            "prefill_tokens": 0,
            "tokens": 0,
            "peak_batch": 0,
            "passes": 0,
            "busy_s": 0.0,  # wall time inside steps: forward passes, sampling, bookkeeping
            "forward_s": 0.0,  # of which inside the forward passes
        }
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens else None
        self._policy: tuple[Policy, int | None] | None = None
        self._pending: deque[Row] = deque()
        self._rows: list[Row] = []  # row i holds slot i
        self._builds: list[Build] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.model: PreTrainedModel
        self.decoder: Decoder
        self.slots: SlotCache
        self._use_model(model)

    # -- control (any thread) -------------------------------------------------------------

    def start(self) -> None:
        """Start the worker thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rollhub-engine", daemon=True)
            self._thread.start()

    def submit(self, row: Row) -> None:
        """Queue a row; it joins the batch at the next step boundary."""
        with self._cond:
            if self._stopping:
                raise GatewayError("the transformers engine is closed", engine="transformers")
            self._pending.append(row)
            self._cond.notify()

    def load_policy(self, policy: Policy, weight_version: int | None) -> None:
        """Take a new policy once the batch drains.

        ``policy`` is either parameter name → new value (copied into the model) or a causal
        LM module with the same vocabulary (sampled from as it is, no copy: a trainer that
        updates it in place publishes it again, with the new version, after each step).
        Rows decoding now finish on the current weights; rows submitted after this call
        are admitted only after the hand-over, and report ``weight_version``.

        :raises GatewayError: a name the model does not have, a shape that differs, or a
            module with another vocabulary.
        """
        policy = checked_policy(self.model, policy)
        with self._cond:
            self._policy = (policy, weight_version)
            self._cond.notify()

    def relabel(self, weight_version: int | None) -> None:
        """The weights held now are also ``weight_version`` (a step that changed nothing):
        rows finishing from now on report it. A policy waiting to be applied brings its own
        version instead, so nothing changes then."""
        with self._cond:
            if self._policy is None:
                self.weight_version = weight_version

    def abort(self, row: Row) -> None:
        """Mark a row aborted; the worker drops it at the next step boundary."""
        row.aborted = True
        with self._cond:
            self._cond.notify()

    def stop(self, timeout: float = 30.0) -> None:
        """Abort every row and join the worker thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def active(self) -> int:
        """Rows currently in the batch plus rows waiting to join."""
        return len(self._rows) + len(self._pending)

    # -- worker thread ----------------------------------------------------------------------

    def _run(self) -> None:
        import torch

        set_thread_count(engine_threads(self.threads))
        with torch.inference_mode():
            while True:
                with self._cond:
                    while (
                        not self._stopping
                        and not self._pending
                        and not self._rows
                        and self._policy is None
                    ):
                        self._cond.wait()
                    if self._stopping:
                        break
                busy = time.perf_counter()
                try:
                    self._drop([r for r in self._rows if r.aborted], "abort")
                    if self._policy is not None and not self._rows:
                        self._apply_policy()
                    if self._policy is None:
                        self._admit()
                    if self._rows:
                        self._step()
                    if not self._rows and self.slots.capacity:
                        self.slots.release()
                        release_free_memory()
                    self.stats["busy_s"] += time.perf_counter() - busy
                except Exception as exc:  # a failed pass fails its rows, not the engine
                    log.exception("engine step failed")
                    err = engine_error("step", exc)
                    rows, self._rows, self._builds = self._rows, [], []
                    if self.prefix_cache is not None:
                        self.prefix_cache.clear()  # may hold states the pass never wrote
                    for r in rows:
                        r.emit(err)
        for r in [*self._rows, *self._pending]:
            self._finish(r, "abort")
        self._rows, self._builds = [], []
        self._pending.clear()

    def _apply_policy(self) -> None:
        with self._cond:
            policy, self._policy = self._policy, None
        if policy is None:
            return
        new, version = policy
        if is_module(new):
            if new is not self.model:
                self._use_model(new)
        else:
            params = dict(self.model.named_parameters())
            for name, value in new.items():
                params[name].copy_(value)
        self.weight_version = version
        if self.prefix_cache is not None:
            self.prefix_cache.clear()  # states of the old weights
        self.stats["policies"] = self.stats.get("policies", 0) + 1

    def _use_model(self, model: PreTrainedModel) -> None:
        self.decoder = Decoder(model)
        self.model = model
        self.slots = SlotCache(
            self.decoder.shape, self.max_batch_size, SLOT_CAPACITY, self.decoder.dtype
        )

    # -- joining ----------------------------------------------------------------------------

    def _admit(self) -> None:
        """Move pending rows into free slots, each with a plan for its prompt's states."""
        waiting: deque[Row] = deque()
        joined: dict[tuple[int, ...], list[Row]] = {}
        while len(self._rows) < self.max_batch_size:
            with self._cond:
                if not self._pending or self._policy is not None:
                    break  # new weights wait for the batch to drain: admit nobody
                row = self._pending.popleft()
            if row.aborted:
                self._finish(row, "abort")
                continue
            key = tuple(row.prompt_ids)
            if key not in joined and self._defer(row.prompt_ids, joined):
                waiting.append(row)
                continue
            joined.setdefault(key, []).append(row)
            self._rows.append(row)
        with self._cond:
            self._pending.extendleft(reversed(waiting))
        for rows in joined.values():
            self._plan(rows)

    def _defer(self, prompt: list[int], joined: dict[tuple[int, ...], list[Row]]) -> bool:
        """Whether ``prompt`` should wait for a prompt being prefilled now that shares
        more of it than the cache holds (it then reuses that prefill instead)."""
        others = [b.prompt for b in self._builds] + [list(k) for k in joined]
        return waits_for_prefill(prompt, others, self.prefix_cache)

    def _plan(self, rows: list[Row]) -> None:
        """Set up the states of rows with one prompt: a shared build, or the hit's span
        plus a private prefill."""
        prompt = rows[0].prompt_ids
        cache = self.prefix_cache
        hit = cache.lookup(prompt) if cache is not None else None
        new = len(prompt) - (hit.length if hit is not None else 0)
        if hit is not None and (len(rows) == 1 or new <= 1) and hit.tail_len + new <= PRIVATE_LIMIT:
            for row in rows:
                slot = self._rows.index(row)
                row.span, row.span_len = hit.span, hit.span_len
                if hit.tail is not None:
                    self.slots.reserve(hit.tail_len + new, self._filled(), len(self._rows))
                    tail = hit.tail
                    self.slots.write(
                        slot, 0, tail.keys[:, :, : hit.tail_len], tail.values[:, :, : hit.tail_len]
                    )
                row.private = hit.tail_len
                row.feed = prompt[hit.length :]
            return
        span = Span.empty(self.decoder.shape, len(prompt), self.decoder.dtype)
        if hit is not None:  # start from the hit's states, copied
            span.copy_from(
                hit.span.keys[:, :, : hit.span_len], hit.span.values[:, :, : hit.span_len]
            )
            if hit.tail is not None:
                span.copy_from(
                    hit.tail.keys[:, :, : hit.tail_len], hit.tail.values[:, :, : hit.tail_len]
                )
        build = Build(prompt, span, prompt[span.length :], rows)
        for row in rows:
            row.build = build
        self._builds.append(build)

    def _filled(self) -> int:
        return max((r.private for r in self._rows), default=0)

    # -- one step ---------------------------------------------------------------------------

    def _step(self) -> None:
        """One forward pass: decode every decoding row, prefill what the budget allows."""
        step, firsts = self._plan_pass()
        if not step.tokens:
            return
        start = time.perf_counter()
        logits = self.decoder.forward(step, self.slots)
        self.stats["forward_s"] += time.perf_counter() - start
        self.stats["passes"] += 1
        batch = len(self._rows)
        self.stats["peak_batch"] = max(self.stats["peak_batch"], batch)
        if step.decode_slots:
            self.stats["decode_steps"] += 1
        drawing: list[tuple[Row, int]] = []
        for i, slot in enumerate(step.decode_slots):
            row = self._rows[slot]
            row.private += 1
            drawing.append((row, i))
        for index, rows in firsts:
            drawing.extend((row, index) for row in rows if not row.aborted)
        draws = [
            Draw(r.params.temperature, r.params.top_k, r.params.top_p, r.generator)
            for r, _ in drawing
        ]
        rows_logits = logits[[i for _, i in drawing]] if drawing else logits[:0]
        done: list[Row] = []
        for (row, _), drawn in zip(
            drawing, sample_rows(rows_logits, draws, self.logprobs_mode), strict=True
        ):
            row.max_batch = max(row.max_batch, batch)
            if isinstance(drawn, ValueError):  # its settings or logits: it fails alone
                self._drop([row], engine_error("sampling", drawn))
            elif self._take(row, *drawn):
                done.append(row)
        self._drop(done, None)

    def _plan_pass(self) -> tuple[Pass, list[tuple[int, list[Row]]]]:
        """This step's pass (:func:`.step_plan.plan_pass`); completed builds are cached
        and their rows start on their spans."""
        rows = self._rows
        self.slots.reserve(
            max(r.private + len(r.feed) + 1 for r in rows), self._filled(), len(rows)
        )
        step, done = plan_pass(rows, self._builds, self.slots, PREFILL_BUDGET)
        self.stats["prefill_tokens"] += done.prefill_tokens
        self.stats["prefills"] += done.tails_done + len(done.built)
        for build in done.built:
            if self.prefix_cache is not None:
                self.prefix_cache.store(build.prompt, build.span, build.span.length)
            for row in build.rows:
                row.span, row.span_len, row.build = build.span, build.span.length, None
        return step, done.firsts

    # -- sampling and leaving ---------------------------------------------------------------

    def _take(self, row: Row, token: int, logprob: float) -> bool:
        """Keep the row's drawn token and emit it; True when the row finished."""
        self.stats["tokens"] += 1
        reason = take_token(row, token, logprob)
        if reason is None:
            return False
        self._finish(row, reason)
        return True

    def _drop(self, rows: list[Row], reason: str | GatewayError | None) -> None:
        """Remove finished (None: states kept), aborted or failed rows; the last takes a slot."""
        if not rows:
            return
        gone = {id(r) for r in rows}
        for slot in sorted((i for i, r in enumerate(self._rows) if id(r) in gone), reverse=True):
            row = self._rows[slot]
            if reason is None:
                self._keep_states(row, slot)
            else:
                self._finish(row, reason)
            row.span = row.build = None  # kept states are the cache's; a row still referenced holds none
            last = len(self._rows) - 1
            if slot != last:
                self.slots.move(last, slot, self._rows[last].private)
                self._rows[slot] = self._rows[last]
            self._rows.pop()

    def _keep_states(self, row: Row, slot: int) -> None:
        """Hand a finished row's states to the prefix cache: the session's next turn
        starts with this row's prompt and sampled tokens."""
        cache = self.prefix_cache
        if cache is None or row.span is None:
            return
        tokens = (row.prompt_ids + row.token_ids)[: row.cached]
        tail = self.slots.span(slot, row.private) if row.private else None
        cache.store(tokens, row.span, row.span_len, tail)

    def _finish(self, row: Row, reason: str | GatewayError) -> None:
        end = reason if isinstance(reason, GatewayError) else None
        row.emit(end or final_generation(row, str(reason), self.weight_version))

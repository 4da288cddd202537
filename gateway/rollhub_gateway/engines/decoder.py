"""One forward pass of a Llama-architecture model over the engine's key/value states.

The embedded engine does not call the Hugging Face ``forward``: at batch 32 on a CPU its
per-layer Python (mask building, cache objects, dispatch through ``nn.Module``) costs as
much as the arithmetic. This module runs the same computation directly over the model's
own parameters (read from its modules every pass, so weights copied or trained in place
are what it samples): embedding, RMSNorm, rotary embeddings, grouped-query attention, the
SiLU MLP, the final norm and the output projection, in the model's dtype.

One pass forwards a flat list of tokens through the linear layers together: one token per
decoding row and the prompt chunks of rows being prefilled, so a row joining the batch
costs no extra pass over the weights. Attention is computed per kind of piece:

- decoding rows attend to their slot (:class:`~.kv_store.SlotCache`) in one batched
  product, and to the span they start with in one product per distinct span, every row
  of a group stacked as queries against the span's keys, read once;
- a prefill chunk attends to its span and, causally, to its own new positions.

Scores of the pieces are joined before one softmax, so the result is the same attention,
reordered. :func:`check_model` says which models it supports.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError

from .policy_tensors import embedding_dtype, input_embedding

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from .kv_store import SlotCache, SlotLayers, Span

__all__ = ["Chunk", "Decoder", "Group", "Pass", "check_model"]

log = logging.getLogger(__name__)

#: model types whose decoder layers this module computes (same layer, optional biases)
FAMILIES = ("llama", "mistral", "qwen2")
#: rotary scalings whose tables do not depend on the sequence length
STATIC_ROPE = ("default", "linear", "llama3", "yarn")


def check_model(model: PreTrainedModel) -> None:
    """Refuse a model this module cannot compute exactly.

    :raises ConfigError: (field ``model``) another architecture, a sliding window, a
        rotary scaling that depends on the sequence length, or another activation.
    """
    config = model.config
    kind = getattr(config, "model_type", None)
    fix = "use one of these families, or the vllm or sglang engine"
    if kind not in FAMILIES:
        raise ConfigError(
            f"the transformers engine computes {', '.join(FAMILIES)} models; this one is "
            f"{kind!r}: {fix}",
            field="model",
        )
    if getattr(config, "hidden_act", "silu") != "silu":
        raise ConfigError(f"activation {config.hidden_act!r} is not SiLU: {fix}", field="model")
    window = getattr(config, "sliding_window", None)
    if window and (kind != "qwen2" or getattr(config, "use_sliding_window", False)):
        raise ConfigError(
            f"sliding-window attention ({window}) is not supported: {fix}", field="model"
        )
    rope = getattr(model.get_decoder().rotary_emb, "rope_type", "default")
    if rope not in STATIC_ROPE:
        raise ConfigError(
            f"rotary scaling {rope!r} depends on the sequence length: {fix}", field="model"
        )


@dataclass
class Group:
    """Decoding rows (slot numbers) that start with one span, and how much of it each uses."""

    span: Span
    slots: list[int]
    lengths: list[int]


@dataclass
class Chunk:
    """Prompt tokens ``tokens[start : start + count]`` of one row, written at ``write`` of
    ``keys``/``values`` (``[layers, kv, cap, dim]``: a span being built, or the row's
    slot), after ``span_len`` positions of ``span`` that it attends to."""

    start: int
    count: int
    keys: torch.Tensor | SlotLayers
    values: torch.Tensor | SlotLayers
    write: int
    span: Span | None = None
    span_len: int = 0


@dataclass
class Pass:
    """What one forward pass computes. Decoding tokens come first, one per decoding row."""

    tokens: list[int]
    positions: list[int]
    rows: int  # slots in use; the decode attention covers slots 0 .. rows - 1
    decode_slots: list[int] = field(default_factory=list)
    decode_write: list[int] = field(default_factory=list)  # slot position of each new token
    slot_len: list[int] = field(default_factory=list)  # per slot: positions attended (>= 1)
    groups: list[Group] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)
    sample: list[int] = field(default_factory=list)  # tokens whose logits are returned


class Decoder:
    """The forward pass over a (checked) Llama-family causal LM's parameters."""

    def __init__(self, model: PreTrainedModel) -> None:
        check_model(model)
        config = model.config
        attn = model.get_decoder().layers[0].self_attn
        self.model = model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(attn.head_dim)
        self.group = self.heads // self.kv_heads
        self.scale = float(attn.scaling)
        self.eps = float(config.rms_norm_eps)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0)
        self.dtype = embedding_dtype(model)
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None  # cos and sin tables

    @property
    def shape(self) -> tuple[int, int, int]:
        """(layers, kv heads, head dim): the shape of key/value states per token."""
        return len(self.model.get_decoder().layers), self.kv_heads, self.head_dim

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin ``[n, dim]`` at ``positions``, from a table the model's own rotary
        module computed (grown by doubling)."""
        import torch

        need = int(positions.max()) + 1
        table = self._rope
        if table is None or table[0].shape[0] < need:
            size = max(need, 2 * (0 if table is None else table[0].shape[0]), 1024)
            rotary = self.model.get_decoder().rotary_emb
            probe = torch.zeros((), dtype=self.dtype)
            cos, sin = rotary(probe, torch.arange(size)[None])
            table = self._rope = (cos[0], sin[0])
        cos_table, sin_table = table
        return cos_table[positions], sin_table[positions]

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        import torch

        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def forward(self, step: Pass, slots: SlotCache) -> torch.Tensor:
        """Run ``step``; write every token's keys and values; return float32 logits
        ``[len(step.sample), vocab]``."""
        import torch
        import torch.nn.functional as F

        decoder = self.model.get_decoder()
        tokens = torch.tensor(step.tokens, dtype=torch.long)
        positions = torch.tensor(step.positions, dtype=torch.long)
        x = F.embedding(tokens, input_embedding(self.model).weight)
        cos, sin = self._rotary(positions)
        cos, sin = cos[:, None, :], sin[:, None, :]
        half = self.head_dim // 2
        n = len(step.tokens)
        plan = _DecodePlan(step, x.dtype) if step.decode_slots else None
        for index, layer in enumerate(decoder.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = self._norm(x, layer.input_layernorm.weight)
            q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(n, self.heads, -1)
            k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(n, self.kv_heads, -1)
            v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(n, self.kv_heads, -1)
            q = q * cos + torch.cat((-q[..., half:], q[..., :half]), -1) * sin
            k = k * cos + torch.cat((-k[..., half:], k[..., :half]), -1) * sin
            out = torch.empty((n, self.heads * self.head_dim), dtype=x.dtype)
            if plan is not None:
                out[: plan.count] = self._decode_attention(index, q, k, v, plan, slots)
            for chunk in step.chunks:
                out[chunk.start : chunk.start + chunk.count] = self._chunk_attention(
                    index, q, k, v, chunk
                )
            x = x + F.linear(out, attn.o_proj.weight, attn.o_proj.bias)
            h = self._norm(x, layer.post_attention_layernorm.weight)
            gate = F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias)
            up = F.linear(h, mlp.up_proj.weight, mlp.up_proj.bias)
            x = x + F.linear(F.silu(gate) * up, mlp.down_proj.weight, mlp.down_proj.bias)
        x = self._norm(x[step.sample], decoder.norm.weight)
        head = self.model.get_output_embeddings()
        return F.linear(x, head.weight, getattr(head, "bias", None)).float()

    def _decode_attention(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        plan: _DecodePlan,
        slots: SlotCache,
    ) -> torch.Tensor:
        """Attention of the decoding tokens (the first ``plan.count``) over their spans
        and slots; their new keys and values are written into the slots first."""
        import torch

        count, rows, kv, group = plan.count, plan.rows, self.kv_heads, self.group
        keys, values = slots.keys[layer], slots.values[layer]
        keys[plan.slot_index, :, plan.write_index] = k[:count]
        values[plan.slot_index, :, plan.write_index] = v[:count]
        q = q[:count] * self.scale
        if plan.dense:
            query = q.view(rows, kv, group, -1)
        else:  # rows still prefilling hold slots too: they get a query of zeros
            query = q.new_zeros((rows, kv, group, self.head_dim))
            query[plan.slot_index] = q.view(count, kv, group, -1)
        width = plan.width
        scores = torch.matmul(query, keys[:rows, :, :width].transpose(-1, -2))
        scores = scores + plan.slot_mask
        span_scores = []
        for g in plan.groups:
            used = g.width
            part = _stacked(query, g.index, kv) @ g.span.keys[layer, :, :used].transpose(-1, -2)
            part = part.view(kv, g.size, group, used).permute(1, 0, 2, 3) + g.mask
            span_scores.append(part)
        if span_scores:
            widest = max(g.width for g in plan.groups)
            if len(plan.groups) == 1 and plan.groups[0].covers:
                joined = span_scores[0]
            else:
                joined = scores.new_full((rows, kv, group, widest), -math.inf)
                for g, part in zip(plan.groups, span_scores, strict=True):
                    joined[g.index, :, :, : g.width] = part
            probs = _softmax(torch.cat([joined, scores], -1))
            out = torch.matmul(probs[..., widest:], values[:rows, :, :width])
            for g in plan.groups:
                p = _stacked(probs[..., : g.width], g.index, kv)
                part = (p @ g.span.values[layer, :, : g.width]).view(kv, g.size, group, -1)
                if g.covers:
                    out = out + part.permute(1, 0, 2, 3)
                else:
                    out[g.index] += part.permute(1, 0, 2, 3)
        else:
            out = torch.matmul(_softmax(scores), values[:rows, :, :width])
        out = out.reshape(rows, -1)
        return out if plan.dense else out[plan.slot_index]

    def _chunk_attention(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: Chunk
    ) -> torch.Tensor:
        """Causal attention of one prefill chunk over its span and its own positions."""
        import torch

        kv, group, count = self.kv_heads, self.group, chunk.count
        lo, hi = chunk.start, chunk.start + count
        keys, values = chunk.keys[layer], chunk.values[layer]
        end = chunk.write + count
        keys[:, chunk.write : end] = k[lo:hi].transpose(0, 1)
        values[:, chunk.write : end] = v[lo:hi].transpose(0, 1)
        # queries as [kv, count * group, dim]: query i is token i // group
        query = (q[lo:hi] * self.scale).view(count, kv, group, -1).transpose(0, 1)
        query = query.reshape(kv, count * group, -1)
        scores = query @ keys[:, :end].transpose(-1, -2)
        token = torch.arange(count).repeat_interleave(group)[:, None]
        hidden = torch.arange(end)[None, :] > (chunk.write + token)
        scores = scores.masked_fill(hidden, -math.inf)
        span, used = chunk.span, chunk.span_len
        if span is not None and used:
            front = query @ span.keys[layer, :, :used].transpose(-1, -2)
            probs = _softmax(torch.cat([front, scores], -1))
            out = probs[..., :used] @ span.values[layer, :, :used]
            out = out + probs[..., used:] @ values[:, :end]
        else:
            out = _softmax(scores) @ values[:, :end]
        return out.view(kv, count, group, -1).transpose(0, 1).reshape(count, -1)


def _softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension in float32, back in the scores' dtype (as HF does)."""
    import torch

    return torch.softmax(scores, -1, dtype=torch.float32).to(scores.dtype)


def _additive(hidden: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where visible, -inf where ``hidden``, as ``[rows, 1, 1, width]``."""
    import torch

    return torch.zeros(hidden.shape, dtype=dtype).masked_fill(hidden, -math.inf)[:, None, None, :]


def _stacked(x: torch.Tensor, index: torch.Tensor | slice, kv: int) -> torch.Tensor:
    """Rows ``index`` of ``x`` ``[rows, kv, group, d]`` as ``[kv, len(index) * group, d]``."""
    part = x[index]
    return part.permute(1, 0, 2, 3).reshape(kv, -1, x.shape[-1])


class _GroupPlan:
    """A :class:`Group` as the tensors one pass needs (built once, used in every layer)."""

    def __init__(self, group: Group, rows: int, dtype: torch.dtype) -> None:
        import torch

        self.span = group.span
        self.size = len(group.slots)
        self.width = max(group.lengths)
        self.covers = group.slots == list(range(rows))
        lo = group.slots[0]
        # adjacent slots (a group admitted together) index as a view: a copy, not a scatter
        adjacent = group.slots == list(range(lo, lo + self.size))
        self.index: torch.Tensor | slice = (
            slice(lo, lo + self.size) if adjacent else torch.tensor(group.slots)
        )
        lengths = torch.tensor(group.lengths)[:, None]
        hidden = torch.arange(self.width)[None, :] >= lengths
        self.mask = _additive(hidden, dtype)


class _DecodePlan:
    """The decoding part of a :class:`Pass` as tensors (built once, used in every layer)."""

    def __init__(self, step: Pass, dtype: torch.dtype) -> None:
        import torch

        self.count, self.rows = len(step.decode_slots), step.rows
        self.dense = step.decode_slots == list(range(step.rows))
        self.slot_index = torch.tensor(step.decode_slots)
        self.write_index = torch.tensor(step.decode_write)
        self.width = max(step.slot_len)
        lengths = torch.tensor(step.slot_len)[:, None]
        hidden = torch.arange(self.width)[None, :] >= lengths
        self.slot_mask = _additive(hidden, dtype)
        self.groups = [_GroupPlan(g, step.rows, dtype) for g in step.groups]

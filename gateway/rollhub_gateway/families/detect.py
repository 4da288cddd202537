"""Which family a chat template belongs to, read from its structure, not its hash.

Each rule looks for the markup the template renders tool calls (or turns) with, so a
template revision that changes wording or whitespace still resolves. Rules are checked
in order, most specific first; the first match wins. ``family=`` in config overrides.
"""

from __future__ import annotations

import logging

from rollhub.errors import ConfigError

from rollhub_gateway.families.atem import AtemFamily
from rollhub_gateway.families.base import Family
from rollhub_gateway.families.gemma4 import Gemma4Family
from rollhub_gateway.families.harmony import HarmonyFamily
from rollhub_gateway.families.json_tools import DeepSeekV3Family, Llama3Family
from rollhub_gateway.families.pythonic import LFM2Family, LFM2InlineFamily
from rollhub_gateway.families.xml_tools import (
    ChatMLFamily,
    GLM4MoeFamily,
    HermesFamily,
    Qwen3CoderFamily,
    Qwen3Family,
)

log = logging.getLogger(__name__)

__all__ = ["FAMILIES", "detect_family", "get_family"]

FAMILIES: dict[str, type[Family]] = {
    cls.name: cls
    for cls in (
        ChatMLFamily,
        HermesFamily,
        Qwen3Family,
        Qwen3CoderFamily,
        GLM4MoeFamily,
        Llama3Family,
        DeepSeekV3Family,
        HarmonyFamily,
        Gemma4Family,
        LFM2Family,
        LFM2InlineFamily,
        AtemFamily,
    )
}

#: (family, markers that must all appear in the template)
_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("gpt_oss", ("<|channel|>", "<|message|>", "<|call|>")),
    ("atem", ("<|start|>", "<|message|>", "<atem:function_calls>", "<atem:invoke")),
    ("gemma4", ("<|turn>", "<|tool_call>call:", "<tool_call|>")),
    ("lfm2", ("<|tool_call_start|>", "<|tool_call_end|>", "tool_calls")),
    # the first LFM2 template lists tools and results but never reads tool_calls
    ("lfm2_inline", ("<|im_start|>", "<|tool_list_start|>", "<|tool_response_start|>")),
    ("deepseek_v3", ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>")),
    ("glm4_moe", ("<tool_call>", "<arg_key>", "<arg_value>")),
    ("qwen3_coder", ("<tool_call>", "<function=", "<parameter=")),
    ("qwen3", ("<tool_call>", "<think>", "<|im_start|>")),
    ("hermes", ("<tool_call>", "</tool_call>")),
    ("llama3", ("<|start_header_id|>", "<|eot_id|>", "tool_calls")),
    ("chatml", ("<|im_start|>", "<|im_end|>")),
]


def get_family(name: str) -> Family:
    """The family registered under ``name``.

    :raises ConfigError: unknown name; the message lists the known ones.
    """
    cls = FAMILIES.get(name)
    if cls is None:
        raise ConfigError(
            f"family={name!r} is not a known template family; use one of {sorted(FAMILIES)}",
            field="family",
        )
    return cls()


def detect_family(template: str | None) -> Family | None:
    """The family whose markers the template renders, or ``None`` when none matches."""
    if not template:
        return None
    for name, markers in _RULES:
        if all(m in template for m in markers):
            log.debug("chat template detected as family %s", name)
            return get_family(name)
    return None

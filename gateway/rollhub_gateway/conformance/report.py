"""The outcome of a conformance run: the families it covers, one report per family, the
checks a report collects (parsing, records) and the table printed from them.

:mod:`rollhub_gateway.conformance` drives the sessions; :mod:`rollhub_gateway.conformance.templates` adds TRL's other
templates; both fill :class:`FamilyReport` rows.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from rollhub_gateway.turns import ParsedOutput

__all__ = [
    "APPEND_ONLY",
    "CONFORMANCE_FAMILIES",
    "FamilyReport",
    "check_parse",
    "check_records",
    "format_table",
]

log = logging.getLogger(__name__)

#: conformance name → (family word, parallel tool calls supported)
CONFORMANCE_FAMILIES: dict[str, tuple[str, bool]] = {
    "smollm2": ("chatml", False),
    "qwen2_5": ("hermes", True),
    "qwen3": ("qwen3", True),
    "qwen3_5": ("qwen3_coder", True),
    "qwen3_6": ("qwen3_coder", True),
    "llama3_1": ("llama3", False),
    "llama3_2": ("llama3", False),
    "deepseek_v3": ("deepseek_v3", True),
    "deepseek_r1": ("deepseek_v3", False),
    "glm4_moe": ("glm4_moe", True),
    "gpt_oss": ("gpt_oss", False),
    "qwen3_instruct_2507": ("hermes", True),
    "qwen3_vl": ("hermes", True),
    "qwen3_5_nothink": ("qwen3_coder", True),
    "qwen3_8": ("qwen3_coder", True),
    "nemotron_3_nano": ("qwen3_coder", True),
    "nemotron_3_super": ("qwen3_coder", True),
    "nemotron_3_ultra": ("qwen3_coder", True),
    "nemotron_3_5_lightning": ("qwen3_coder", True),
    "gemma4": ("gemma4", True),
    "gemma4_v2": ("gemma4", True),
    "gemma4_v3": ("gemma4", True),
    "gemma4_v4": ("gemma4", True),
    "gemma4_v5": ("gemma4", True),
    "diffusion_gemma": ("gemma4", True),
    "lfm2": ("lfm2_inline", True),
    "lfm2_v2": ("lfm2", True),
    "lfm2_2_5": ("lfm2", True),
    "lfm2_2_5_v2": ("lfm2", True),
    "lfm2_2_5_vl": ("lfm2", True),
    "muse_glimmer": ("atem", True),
}
#: templates that never rewrite earlier turns: any rerender or fork there is a bug
APPEND_ONLY = {
    "smollm2", "qwen2_5", "llama3_1", "llama3_2", "qwen3_instruct_2507", "qwen3_vl",
    "qwen3_8", "gemma4_v2", "lfm2", "lfm2_v2", "muse_glimmer",
}  # fmt: skip


@dataclass
class FamilyReport:
    """The outcome of one family's session."""

    name: str
    family: str
    turns: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    sampled: int = 0
    in_records: int = 0
    retok_diff: int = 0
    failures: list[str] = field(default_factory=list)
    via: str = "direct"

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return not self.failures


def check_parse(
    report: FamilyReport,
    step: int,
    parsed: ParsedOutput,
    streamed: str,
    content: str,
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    got = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
    if got != [(n, a) for n, a in calls]:
        report.failures.append(f"turn {step}: tool calls {got} != {calls}")
    if parsed.content.strip() != content.strip() or parsed.ill_formed:
        report.failures.append(f"turn {step}: content {parsed.content!r} != {content!r}")
    if not parsed.content.startswith(streamed):
        report.failures.append(f"turn {step}: streamed {streamed!r} is not a prefix of the content")


def check_records(
    report: FamilyReport, records: list[Any], sampled: dict[int, tuple[list[int], list[float]]]
) -> None:
    report.sampled = sum(len(ids) for ids, _ in sampled.values())
    report.in_records = sum(r.num_sampled for r in records)
    if report.in_records != report.sampled:
        report.failures.append(f"{report.in_records} ids trained, {report.sampled} sampled")
    found = set()
    for rec in records:
        for span in rec.turns:
            ids, lps = sampled[span.turn_index]
            if rec.response_ids[span.start : span.end] != ids:
                report.failures.append(f"turn {span.turn_index}: ids differ in the record")
            if rec.response_mask[span.start : span.end] != [1] * len(ids):
                report.failures.append(f"turn {span.turn_index}: mask is not 1 on sampled ids")
            if rec.response_logprobs[span.start : span.end] != lps:
                report.failures.append(f"turn {span.turn_index}: logprobs differ")
            found.add(span.turn_index)
    if found != set(sampled):
        report.failures.append(f"turns missing from records: {sorted(set(sampled) - found)}")


def format_table(reports: list[FamilyReport], *, markdown: bool = False) -> str:
    """The per-family table."""
    head = [
        "family",
        "via",
        "parser",
        "turns",
        "append",
        "rerender",
        "fork",
        "masked tokens",
        "sampled ids",
        "trained (mask 1)",
        "retokenisation differs",
        "result",
    ]
    for r in reports:
        if r.via == "http":
            r.retok_diff = -1  # not observable through HTTP
    rows: list[list[Any]] = [
        [r.name, r.via, r.family, r.turns, r.counts.get("append", 0), r.counts.get("rerender", 0),
         r.counts.get("fork", 0), r.counts.get("masked_tokens", 0), r.sampled, r.in_records,
         r.retok_diff if r.retok_diff >= 0 else "", "ok" if r.ok else "FAIL: " + "; ".join(r.failures[:3])]
        for r in reports
    ]  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*map(str, row)) for row in [head, *rows])

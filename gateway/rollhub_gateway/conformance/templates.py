"""Which real chat template each conformance name runs on, and the test vocabulary under it.

Every chat template the installed ``trl`` wheel ships (``trl/chat_templates/*.jinja``) is
accounted for: a template that defines a tool-call syntax has a conformance name (its
session must pass every check), one that does not is listed in :data:`NO_TOOL_TEMPLATES`
(tools are refused with a clear error before anything is sampled). ``*_training.jinja``
files are TRL's patched copies of an original and are checked under the original's name.

The names, files and test vocabularies are the rows of
:data:`rollhub_gateway.testing_tokenizers.FAMILY_TEMPLATES`: a real base vocabulary with the
family's real special tokens added, so every template marker is one token, as in the
model's own tokenizer.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rollhub.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

from rollhub_gateway.conformance.report import FamilyReport
from rollhub_gateway.testing_tokenizers import FAMILY_TEMPLATES

log = logging.getLogger(__name__)

__all__ = [
    "NO_TOOL_TEMPLATES",
    "TEMPLATE_FILES",
    "refusal_report",
    "template_for",
    "tokenizer_for",
    "training_copies",
    "trl_template_names",
]

#: conformance name → TRL template file, for every template with a tool-call syntax
TEMPLATE_FILES: dict[str, str] = {name: row[0] for name, row in FAMILY_TEMPLATES.items()}

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


def refusal_report(template: str) -> FamilyReport:
    """A conformance row for a TRL template without a tool-call syntax: tools must be
    refused with a :class:`~rollhub.errors.GatewayError` naming ``family`` before anything
    is rendered or sampled, and a chat without tools must still render."""
    from rollhub.errors import GatewayError

    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.conformance.script import TOOLS
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
        if exc.context.get("field") != "family":
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


def tokenizer_for(name: str) -> PreTrainedTokenizerFast:
    """The test tokenizer of a conformance name, without a chat template (shared, cached)."""
    from rollhub_gateway.testing_tokenizers import vocab_tokenizer

    return vocab_tokenizer(name)

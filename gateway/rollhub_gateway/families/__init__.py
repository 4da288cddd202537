"""Template families: how each model family's chat template wants messages and how its
sampled text splits into reasoning, content and tool calls. See ``detect.py`` for how a
template is recognised and ``docs/token-fidelity.md`` for the list."""

from rollhub_gateway.families.base import Family, IncrementalDecoder, MarkupStreamParser
from rollhub_gateway.families.detect import FAMILIES, detect_family, get_family

__all__ = [
    "FAMILIES",
    "Family",
    "IncrementalDecoder",
    "MarkupStreamParser",
    "detect_family",
    "get_family",
]

"""The ``rllm`` token source as the rLLM tests configure it: the model and chat template the
upstream serves, and :func:`source_options`, its ``[token_source]`` options in front of an
upstream."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.plugins.rllm.vllm_upstream import VllmStyleUpstream

MODEL = "smollm2-135m-instruct"
TEMPLATE = Path(__file__).parents[3] / "examples" / "math" / "chatml_tools.jinja"


def source_options(upstream: VllmStyleUpstream, **options: Any) -> dict[str, Any]:
    """``[token_source]`` options of an rllm source in front of ``upstream``."""
    return {"engine_url": f"{upstream.url}/v1", "model": MODEL, **options}

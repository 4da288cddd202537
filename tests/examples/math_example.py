"""What the example tests run: the math example's folder and the model they serve
(SmolLM2, whose tokenizer the scripted gateway uses)."""

from __future__ import annotations

from pathlib import Path

MODEL = "smollm2-135m-instruct"
MATH = Path(__file__).parents[2] / "examples" / "math"

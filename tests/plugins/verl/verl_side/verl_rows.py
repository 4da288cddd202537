"""The dataset rows the verl-side tests feed verl: GSM8K-style rows as verl's data
preprocessing writes them, their parquet file, and the prompt and response lengths verl
cuts them to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROMPT_LENGTH = 256
RESPONSE_LENGTH = 96


def rows_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write verl-style rows (data_source, prompt, reward_model, extra_info) to parquet."""
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


def row(index: int, question: str, mode: str = "single", truth: str = "42") -> dict[str, Any]:
    """One GSM8K-style row as verl's data preprocessing writes it."""
    return {
        "data_source": "rollhub/test",
        "prompt": [
            {"role": "system", "content": "You are a careful math assistant."},
            {"role": "user", "content": question},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"index": index, "mode": mode},
    }

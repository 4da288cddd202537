"""The verl GSM8K example: its agent's answer rule and tool, and its data rows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"verl_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("text", "truth", "reward"),
    [
        ("so 3 + 4 = 7\n#### 7", "7", 1.0),
        ("#### 1,250", "1250", 1.0),
        ("The answer is 12.", "12", 1.0),
        ("#### 8 apples, not 9", "8", 1.0),
        ("#### 9", "8", 0.0),
        (None, "8", 0.0),
        ("no number", "8", 0.0),
    ],
)
def test_reward_reads_the_number_after_the_marks(text, truth, reward):
    assert load("agent").score(text, truth) == reward


def test_calculator_is_arithmetic_only():
    calculate = load("agent").calculate
    assert calculate("(12 + 7) * 3") == "57"
    assert calculate("7 / 2") == "3.5"
    assert calculate("1,000 - 1") == "999"
    assert calculate("__import__('os')").startswith("error:")
    assert calculate("1 / 0").startswith("error:")


def test_synthetic_rows_have_verls_columns():
    splits = load("prepare_data").synthetic(16)
    assert len(splits["train"]) == 14 and len(splits["test"]) == 2
    row = splits["train"][0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    question = row["prompt"][1]["content"]
    numbers = [int(w) for w in question.replace("?", "").split() if w.isdigit()]
    b, a, c = numbers
    assert row["reward_model"]["ground_truth"] == str(a * b + c)
    assert [r["extra_info"]["index"] for r in splits["test"]] == [0, 1]

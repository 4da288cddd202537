"""Write GSM8K as the parquet files verl reads (``data/gsm8k/{train,test}.parquet``).

    python examples/verl/prepare_data.py              # GSM8K from the Hugging Face hub
    python examples/verl/prepare_data.py --synthetic 256   # offline arithmetic problems

Each row has verl's columns: ``data_source``, ``prompt`` (chat messages; verl passes them
to the agent loop as ``raw_prompt``, rollhub hands them to the agent as ``messages``),
``ability``, ``reward_model.ground_truth`` and ``extra_info.index``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

SYSTEM = (
    "Solve the problem step by step. You may use the calculator tool. "
    "End with the final answer after '####', e.g. '#### 42'."
)
OUT = Path(__file__).resolve().parent / "data" / "gsm8k"


def to_row(question: str, answer: str, index: int, split: str, source: str) -> dict[str, Any]:
    """One verl row."""
    return {
        "data_source": source,
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index},
    }


def gsm8k() -> dict[str, list[dict[str, Any]]]:
    """GSM8K ``main`` from the hub; the reference answer is the number after ``####``."""
    from datasets import load_dataset

    data = load_dataset("openai/gsm8k", "main")
    return {
        split: [
            to_row(r["question"], r["answer"].split("####")[-1].strip().replace(",", ""), i,
                   split, "openai/gsm8k")
            for i, r in enumerate(data[split])
        ]
        for split in ("train", "test")
    }  # fmt: skip


def synthetic(n: int, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Word problems with known answers, for runs without network access."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = rng.randint(2, 40), rng.randint(2, 12), rng.randint(1, 30)
        q = f"A shop sells {b} boxes with {a} pencils each and then {c} loose pencils. How many pencils is that?"
        rows.append(to_row(q, str(a * b + c), i, "train", "synthetic/pencils"))
    cut = max(1, n // 8)
    test = [dict(r, extra_info={"split": "test", "index": i}) for i, r in enumerate(rows[:cut])]
    return {"train": rows[cut:], "test": test}


def main() -> None:
    """Write the two parquet files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic", type=int, default=None, metavar="N")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    import pandas as pd

    splits = synthetic(args.synthetic) if args.synthetic else gsm8k()
    args.out.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        pd.DataFrame(rows).to_parquet(args.out / f"{split}.parquet")
        print(f"{args.out / f'{split}.parquet'}: {len(rows)} rows")


if __name__ == "__main__":
    main()

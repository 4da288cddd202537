"""Generate the calculator task's problems: a training set and a disjoint held-out set.

Each line is ``{"id": "calc-train-0001", "question": "What is 47 * 386?", "answer": 18142}``.
The numbers are too large to work out in one's head at SmolLM2-135M's scale, so only the
calculator tool gets them right. Deterministic for a given seed::

    python examples/math/make_calc_dataset.py     # data/calc-train.jsonl, data/calc-heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA = Path(__file__).parent / "data"


def problem(r: random.Random) -> tuple[str, int]:
    """One question and its exact answer: mostly products, some 4-digit sums and differences."""
    kind = r.random()
    if kind < 0.6:
        a, b = r.randint(12, 99), r.randint(101, 999)
        return f"What is {a} * {b}?", a * b
    a, b = r.randint(1000, 9999), r.randint(1000, 9999)
    if kind < 0.8:
        return f"What is {a} + {b}?", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def generate(count: int, seed: int, prefix: str, exclude: set[str]) -> list[dict[str, object]]:
    """``count`` distinct problems whose questions are not in ``exclude``."""
    r = random.Random(seed)
    rows: list[dict[str, object]] = []
    seen = set(exclude)
    while len(rows) < count:
        question, answer = problem(r)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"id": f"{prefix}-{len(rows) + 1:04d}", "question": question, "answer": answer})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=400)
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    train = generate(args.train, args.seed, "calc-train", set())
    heldout = generate(args.heldout, args.seed + 1, "calc-heldout", {str(x["question"]) for x in train})
    for name, rows in (("calc-train.jsonl", train), ("calc-heldout.jsonl", heldout)):
        with (DATA / name).open("w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        print(f"{len(rows)} problems -> {DATA / name}")


if __name__ == "__main__":
    main()

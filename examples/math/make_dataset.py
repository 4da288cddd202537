"""Generate arithmetic word problems with exact answers, as JSONL.

Each line is ``{"id": "math-0001", "question": "...", "answer": <number>}``. The output is
deterministic for a given ``--seed`` and ``--count``::

    python examples/math/make_dataset.py            # 300 problems -> examples/math/data/math.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

DEFAULT_OUT = Path(__file__).parent / "data" / "math.jsonl"

Problem = tuple[str, Fraction | int]


def _sum(r: random.Random) -> Problem:
    a, b = r.randint(2, 20), r.randint(2, 20)
    return f"What is {a} + {b}?", a + b


def _product(r: random.Random) -> Problem:
    a, b = r.randint(2, 9), r.randint(2, 9)
    return f"What is {a} times {b}?", a * b


def _difference(r: random.Random) -> Problem:
    a = r.randint(10, 40)
    b = r.randint(2, a - 1)
    return f"What is {a} - {b}?", a - b


def _apples(r: random.Random) -> Problem:
    a, b, c = r.randint(5, 60), r.randint(2, 9), r.randint(3, 24)
    q = (
        f"A farmer has {a} apples. He buys {b} bags with {c} apples in each bag. "
        f"How many apples does he have now?"
    )
    return q, a + b * c


def _change(r: random.Random) -> Problem:
    price, n = r.randint(2, 15), r.randint(2, 6)
    bill = next(b for b in (20, 50, 100, 200) if b > price * n)
    q = (
        f"Pencil cases cost ${price} each. Maria buys {n} of them and pays with a ${bill} bill. "
        f"How many dollars of change does she get?"
    )
    return q, bill - price * n


def _train(r: random.Random) -> Problem:
    s1, h1, s2, h2 = r.randint(40, 120), r.randint(2, 5), r.randint(40, 120), r.randint(2, 4)
    q = (
        f"A train travels at {s1} km/h for {h1} hours, then at {s2} km/h for {h2} hours. "
        f"How many kilometres does it travel in total?"
    )
    return q, s1 * h1 + s2 * h2


def _cookies(r: random.Random) -> Problem:
    n, k = r.randint(2, 8), r.randint(4, 15)
    e = r.randint(1, k - 1)
    q = (
        f"{n} friends share {n * k} cookies equally. Each friend eats {e} cookies of their "
        f"share. How many cookies are left in total?"
    )
    return q, n * (k - e)


def _rectangle(r: random.Random) -> Problem:
    w, h = r.randint(3, 40), r.randint(3, 40)
    q = (
        f"A rectangle is {w} cm wide and {h} cm long. What is its area in square centimetres "
        f"minus its perimeter in centimetres?"
    )
    return q, w * h - 2 * (w + h)


def _savings(r: random.Random) -> Problem:
    a, w = r.randint(5, 45), r.randint(3, 20)
    b = r.randint(1, a * w - 1)
    q = f"Tom saves ${a} every week for {w} weeks, then spends ${b} on a bike. How many dollars does he have left?"
    return q, a * w - b


def _pages(r: random.Random) -> Problem:
    per_day, days = r.randint(8, 40), r.randint(2, 12)
    pages = per_day * days + r.randint(1, 200)
    q = (
        f"A book has {pages} pages. Sam reads {per_day} pages a day for {days} days. "
        f"How many pages does he still have to read?"
    )
    return q, pages - per_day * days


def _discount(r: random.Random) -> Problem:
    price, off = 20 * r.randint(2, 30), r.choice([10, 15, 20, 25, 30, 40, 50])
    q = f"A jacket costs ${price}. It is on sale for {off}% off. What is the sale price in dollars?"
    return q, Fraction(price * (100 - off), 100)


def _average(r: random.Random) -> Problem:
    n = r.randint(3, 6)
    scores = [r.randint(50, 100) for _ in range(n)]
    listed = ", ".join(str(s) for s in scores[:-1]) + f" and {scores[-1]}"
    q = f"A student scored {listed} on {n} tests. What is the average score?"
    return q, Fraction(sum(scores), n)


def _expression(r: random.Random) -> Problem:
    a, b, d = r.randint(2, 30), r.randint(2, 30), r.randint(2, 12)
    c = d * r.randint(2, 20)
    q = f"What is {a} times {b}, plus {c} divided by {d}?"
    return q, a * b + Fraction(c, d)


def _tank(r: random.Random) -> Problem:
    start, rate, minutes, leak = (
        r.randint(0, 50),
        r.randint(5, 30),
        r.randint(2, 15),
        r.randint(1, 4),
    )
    q = (
        f"A tank holds {start} litres of water. A pump adds {rate} litres per minute while a "
        f"leak loses {leak} litres per minute. How many litres are in the tank after "
        f"{minutes} minutes?"
    )
    return q, start + (rate - leak) * minutes


# One-step problems come first and alternate with word problems, so that even a tiny
# model gets some right: GRPO learns nothing from groups whose rewards are all equal.
TEMPLATES: list[Callable[[random.Random], Problem]] = [
    _sum,
    _apples,
    _product,
    _change,
    _difference,
    _train,
    _cookies,
    _rectangle,
    _savings,
    _pages,
    _discount,
    _average,
    _expression,
    _tank,
]


def _as_number(value: Fraction | int) -> int | float:
    value = Fraction(value)
    return int(value) if value.denominator == 1 else round(float(value), 6)


def generate(count: int = 300, seed: int = 1234) -> list[dict[str, object]]:
    """``count`` problems, cycling through the templates in a seeded random order."""
    r = random.Random(seed)
    rows = []
    for i in range(count):
        template = TEMPLATES[i % len(TEMPLATES)] if i < len(TEMPLATES) else r.choice(TEMPLATES)
        question, answer = template(r)
        rows.append({"id": f"math-{i + 1:04d}", "question": question, "answer": _as_number(answer)})
    return rows


def main(argv: list[str] | None = None) -> None:
    """``python examples/math/make_dataset.py [--count N] [--seed S] [--out PATH]``."""
    parser = argparse.ArgumentParser(description="Generate arithmetic word problems as JSONL.")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as fh:
        for row in generate(args.count, args.seed):
            fh.write(json.dumps(row) + "\n")
    print(f"wrote {args.count} problems to {args.out}")


if __name__ == "__main__":
    main()

"""How long ``import rollhub`` takes in a fresh interpreter (target: < 150 ms).

    .venv/bin/python bench/bench_import.py [--runs 20]

Reports the median and best wall time of ``python -c "import rollhub"`` minus the same for
``python -c "pass"`` (the interpreter's own start-up), and the modules it pulled in.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def _time(code: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    base = _time("pass", args.runs)
    imp = _time("import rollhub", args.runs)
    full = _time("import rollhub; rollhub.RolloutConfig", args.runs)
    mods = subprocess.run(
        [sys.executable, "-c", "import sys; b=set(sys.modules); import rollhub; "
         "print(len(set(sys.modules)-b))"], capture_output=True, text=True, check=True
    ).stdout.strip()
    med = lambda xs: statistics.median(xs) * 1000  # noqa: E731
    print(f"interpreter start-up      median {med(base):6.1f} ms")
    print(f"import rollhub            median {med(imp) - med(base):6.1f} ms "
          f"(best {(min(imp) - min(base)) * 1000:.1f} ms), {mods} modules")
    print(f"+ first data type access  median {med(full) - med(base):6.1f} ms (loads pydantic)")


if __name__ == "__main__":
    main()

"""Tests of bench/gpu (the GPU checks): the parts that run without a GPU.

``bench/gpu/run.py`` imports its ``gpucheck`` package from its own folder; importing this
test package puts that folder on ``sys.path`` the same way, before any test module runs.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_GPU = ROOT / "bench" / "gpu"
if str(BENCH_GPU) not in sys.path:
    sys.path.insert(0, str(BENCH_GPU))

"""Freed tensor memory goes back to the system once the allocator is tuned (glibc)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import torch
from pathlib import Path
from rollhub_gateway.engines.allocator import tune_allocator

def rss():
    line = [x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS")]
    return int(line[0].split()[1]) // 1024

print(tune_allocator())
big = torch.ones(8 * 2**20 // 4)  # a mapped block freed: glibc raises its threshold to 8 MiB
del big
blocks = [torch.ones(2**20 // 4) for _ in range(400)]  # 400 MiB of weight-sized blocks
kept = blocks[19::20]  # some stay alive among them, as tensors do
held = rss()
del blocks
print(held - rss())
"""


def run_probe(code: str, tuned: bool) -> list[str]:
    """What ``code`` prints, run in a fresh interpreter with the tuning on or off."""
    env = {**os.environ, "ROLLHUB_MALLOC_TUNING": "1" if tuned else "0"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.parametrize("tuned", [True, False])
def test_weight_sized_blocks_are_returned_when_freed(tuned: bool) -> None:
    out = run_probe(PROBE, tuned)
    assert out[0] == str(tuned)
    returned = int(out[1])
    if tuned:
        assert returned >= 350, returned  # MiB back to the system
    else:
        assert returned < 100, returned  # what the default thresholds keep resident


HOLES = """
import torch
from pathlib import Path
from rollhub_gateway.engines.allocator import release_free_memory, tune_allocator

def rss():
    line = [x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS")]
    return int(line[0].split()[1]) // 1024

tune_allocator()
blocks = [torch.ones(128 * 1024 // 4) for _ in range(2400)]  # 300 MiB under the threshold
kept = blocks[19::20]  # live blocks between the freed ones: holes, not a free top
held = rss()
del blocks
freed = rss()
print(held - freed, release_free_memory(), freed - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
@pytest.mark.parametrize("tuned", [True, False])
def test_holes_between_live_blocks_are_returned_on_release(tuned: bool) -> None:
    out = run_probe(HOLES, tuned)
    on_free, released, on_release = int(out[0]), out[1], int(out[2])
    assert on_free < 50, on_free  # freeing alone keeps the holes resident
    assert released == str(tuned)
    if tuned:
        assert on_release >= 250, on_release  # MiB back to the system
    else:
        assert on_release < 50, on_release  # turned off: nothing asked of malloc

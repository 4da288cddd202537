"""Freed tensor memory goes back to the system once the allocator is tuned (glibc), and a
step-sized tensor freed and allocated again reuses its pages instead of faulting new ones."""

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
big = torch.ones(30 * 2**20 // 4)  # a mapped block freed: glibc raises its threshold to 30 MiB
del big
blocks = [torch.ones(20 * 2**20 // 4) for _ in range(20)]  # 400 MiB of blocks over 16 MiB
kept = blocks[4::5]  # some stay alive among them, as tensors do
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
        assert returned >= 300, returned  # MiB back to the system
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


REUSE = """
import resource
import torch
from rollhub_gateway.engines.allocator import tune_allocator

def draw():  # a decoding step's draw: 32 rows of float64 uniforms over 49,152 ids
    block = torch.empty((32, 49152), dtype=torch.float64).fill_(0.5)
    del block

tune_allocator()
for _ in range(8):  # the heap grows to hold it (glibc takes a few rounds)
    draw()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    draw()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_step_sized_block_is_reused_not_faulted_in_again() -> None:
    faults = int(run_probe(REUSE, tuned=True)[0])
    pages = 32 * 49152 * 8 // 4096  # 3,072 pages of 4 KiB per block
    # mapped anew each time, 20 blocks fault ~61,000 pages; reused, next to none
    assert faults < pages, faults

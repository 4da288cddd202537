"""The engine's decoding thread and the trainer's keep their own torch thread counts."""

from __future__ import annotations

import threading

import torch
from rollhub_gateway.engines.cpu_threads import engine_threads, set_thread_count, usable_cores


def _count_after_another_thread_sets(count: int, other: int) -> int:
    """A thread sets ``count``, another then sets ``other``, then the first one works."""
    seen: list[int] = []
    set_here, set_there = threading.Event(), threading.Event()

    def first() -> None:
        set_thread_count(count)
        set_here.set()
        set_there.wait(10)
        a = torch.randn(64, 64)
        _ = a @ a  # the thread's first torch operation
        seen.append(torch.get_num_threads())

    def second() -> None:
        set_here.wait(10)
        set_thread_count(other)
        set_there.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return seen[0]


def test_a_count_set_before_a_threads_first_operation_is_kept() -> None:
    # torch.set_num_threads alone: the first operation takes the other thread's 2
    assert _count_after_another_thread_sets(1, 2) == 1
    assert _count_after_another_thread_sets(2, 1) == 2


def test_the_engine_leaves_a_core_unless_told() -> None:
    assert engine_threads(3) == 3
    assert engine_threads(None) == max(1, usable_cores() - 1)

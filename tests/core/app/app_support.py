"""Helpers shared by the agent-side tests (imported by name; conftest modules are not)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

API_KEY = "sk-rollhub-test-SECRET-9f8e7d"


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s: {predicate}")

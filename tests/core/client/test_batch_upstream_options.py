"""agentcore-rl-toolkit's run_batch options never fall into every rollout's ``_rollout``."""

from __future__ import annotations

import pytest
from rollhub.batch import run_batch_async
from rollhub.errors import ConfigError


@pytest.mark.parametrize(
    ("option", "fix"),
    [("max_concurrent_sessions", "max_concurrent=N"), ("initial_interval", "poll_initial_s")],
)
async def test_upstream_client_options_are_refused_with_the_rollhub_way(option, fix):
    with pytest.raises(ConfigError, match=fix) as info:
        async for _ in run_batch_async(None, [{"id": "a"}], **{option: 4}):  # type: ignore[arg-type]
            pass
    assert info.value.field == option

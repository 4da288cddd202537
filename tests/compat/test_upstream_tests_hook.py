"""The import hook that runs agentcore-rl-toolkit's own unit tests against rollhub.compat
(``python -m tests.compat.upstream_tests``; the counts are in the migration guide)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_upstream_module_paths_resolve_to_rollhub_compat(tmp_path: Path) -> None:
    probe = tmp_path / "probe_test.py"
    probe.write_text(
        "import pytest\n"
        "from agentcore_rl_toolkit import AgentCoreRuntimeApp\n"
        "from agentcore_rl_toolkit.rollout_session.lifecycle import run_rollout_with_bounds\n"
        "from agentcore_rl_toolkit.aws_tools.persistent_dict import PersistentDict\n"
        "import agentcore_rl_toolkit.runtime.client as client_mod\n"
        "def test_names(monkeypatch):\n"
        "    import rollhub.compat.runtime_client as mine\n"
        "    assert AgentCoreRuntimeApp.__module__ == 'rollhub.compat.runtime_app'\n"
        "    assert run_rollout_with_bounds.__module__ == 'rollhub.compat.session_bounds'\n"
        "    assert PersistentDict.__module__ == 'rollhub.compat.session_state'\n"
        "    monkeypatch.setattr('agentcore_rl_toolkit.runtime.client.POLL_INTERVAL', 0.5)\n"
        "    assert client_mod is mine and mine.POLL_INTERVAL == 0.5\n"
        "def test_what_is_not_offered_says_so():\n"
        "    with pytest.raises(ImportError, match='offers nothing for agentcore_rl_toolkit"
        ".concurrency.ray_adapters'):\n"
        "        import agentcore_rl_toolkit.concurrency.ray_adapters  # noqa: F401\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.compat.upstream_tests", str(probe)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout

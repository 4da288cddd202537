"""Every public top-level name of agentcore-rl-toolkit (0.1.4 and 0.2.0) is in rollhub.compat
with upstream's signatures, read off the installed upstream code (not written down here)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.compat.api_shape import EXTRA, NOT_OFFERED, describe
from tests.compat.upstream_venv import upstream_python

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-agentcore-rl-toolkit.md"
# Keyword options rollhub's app adds (RolloutApp's); upstream's app takes none.
# Members not offered, each with its reason in the migration guide.
MEMBERS_NOT_OFFERED = {("AgentCoreRLApp", "websocket"), ("AgentCoreRuntimeApp", "websocket")}
EXTENSIONS = {("AgentCoreRLApp", "__init__"): [["options", "VAR_KEYWORD", None]]}
# Keyword options 0.2.0 added to these classes (rollhub.compat takes 0.2.0's signature).
EXTENSIONS_014 = {
    ("AgentCoreRuntimeApp", "__init__"): [["background", "KEYWORD_ONLY", "False"]],
    ("AgentCoreHttpClient", "__init__"): [["aws_client", "KEYWORD_ONLY", "None"]],
}


def _compare(upstream: dict, compat: dict, extensions: dict | None = None) -> list[str]:
    extensions = {**EXTENSIONS, **(extensions or {})}
    problems = []
    for name, members in upstream.items():
        mine = compat.get(name)
        if mine is None:
            problems.append(f"{name}: missing from rollhub.compat")
            continue
        for member, shape in members.items():
            if (name, member) in MEMBERS_NOT_OFFERED:
                continue
            have = mine.get(member)
            if have is None:
                problems.append(f"{name}.{member}: missing")
                continue
            if isinstance(shape, list) and isinstance(have, list):
                have = [p for p in have if p not in extensions.get((name, member), [])]
            if have != shape:
                problems.append(f"{name}.{member}: upstream {shape} != compat {have}")
    return problems


def test_every_name_with_upstreams_signatures_020() -> None:
    import importlib.metadata

    import agentcore_rl_toolkit

    assert importlib.metadata.version("agentcore-rl-toolkit") == "0.2.0"
    upstream = describe("agentcore_rl_toolkit")
    assert set(upstream) == (set(agentcore_rl_toolkit.__all__) - set(NOT_OFFERED)) | set(EXTRA)
    assert "initial_interval" in str(upstream["RolloutFuture"]["__init__"])
    assert _compare(upstream, describe("rollhub.compat")) == []


@pytest.fixture(scope="module")
def python014() -> str:
    return str(upstream_python())


def test_every_name_with_upstreams_signatures_014(python014: str) -> None:
    shape = Path(__file__).with_name("api_shape.py")
    done = subprocess.run(
        [python014, str(shape), "agentcore_rl_toolkit"],
        capture_output=True, text=True, timeout=120, check=True,
        env={"AWS_DEFAULT_REGION": "us-west-2", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    out = json.loads(done.stdout)
    assert set(out["shape"]) == (set(out["all"]) - set(NOT_OFFERED)) | set(EXTRA)
    assert all(out["shape"].values())
    assert _compare(out["shape"], describe("rollhub.compat"), EXTENSIONS_014) == []


def test_names_not_offered_are_in_the_guide_with_a_reason() -> None:
    import rollhub.compat

    guide = GUIDE.read_text()
    for name in NOT_OFFERED:
        assert not hasattr(rollhub.compat, name)
        assert f"`{name}`" in guide, f"the migration guide does not say why {name} is absent"
    for owner, member in MEMBERS_NOT_OFFERED:
        assert not hasattr(getattr(rollhub.compat, owner), member)
        assert f"`{owner}.{member}`" in guide

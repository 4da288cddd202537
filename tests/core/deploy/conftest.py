"""Fixtures of the deploy tests: real botocore clients under ``Stubber``, a fake container CLI.

Every AWS request goes to a real botocore client whose ``Stubber`` checks the parameters
against the service model (as a real call would) and answers with responses that botocore
also validates against the model's output shapes. The shared helpers are in
:mod:`tests.core.deploy.stubbed_aws` and :mod:`tests.core.deploy.fake_tool`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import botocore.session
import pytest
from botocore.stub import Stubber

from tests.core.deploy.fake_tool import FAKE_TOOL, FakeTool
from tests.core.deploy.stubbed_aws import CONTROL, REGION, StubbedAws


@pytest.fixture(scope="session")
def botocore_session() -> botocore.session.Session:
    """One session for all tests: its loader caches the service models between clients."""
    return botocore.session.get_session()


@pytest.fixture
def aws(botocore_session: botocore.session.Session) -> Iterator[StubbedAws]:
    session = botocore_session
    kwargs = {
        "region_name": REGION,
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "not-a-secret",
    }
    ecr = session.create_client("ecr", **kwargs)
    control = session.create_client(CONTROL, **kwargs)
    with Stubber(ecr) as ecr_stub, Stubber(control) as control_stub:
        yield StubbedAws(ecr, control, ecr_stub, control_stub)


@pytest.fixture
def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTool:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "docker"
    tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_TOOL}" "$@"\n')
    tool.chmod(0o755)
    log = tmp_path / "tool.jsonl"
    monkeypatch.setenv("PATH", os.pathsep.join([str(bindir), "/usr/bin", "/bin"]))
    monkeypatch.setenv("FAKE_TOOL_LOG", str(log))
    monkeypatch.delenv("FAKE_TOOL_FAIL", raising=False)
    return FakeTool(path=tool, log=log)


@pytest.fixture
def agent_project(tmp_path: Path) -> Path:
    """A minimal agent project: pyproject naming rollhub, a uv.lock, agent.py."""
    root = tmp_path / "agent"
    root.mkdir()
    (root / "pyproject.toml").write_text(
        '[project]\nname = "my-agent"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["rollhub>=0.1", "openai>=1.40"]\n'
    )
    (root / "uv.lock").write_text("version = 1\n")
    (root / "agent.py").write_text("from rollhub.app import RolloutApp\n\napp = RolloutApp()\n")
    return root

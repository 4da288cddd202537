"""Fixtures of the slime backend tests.

- ``slime_stub`` (autouse): the stand-in ``slime`` package (``slime_stub/``) on ``sys.path``.
- ``sglang``: a loopback server speaking SGLang's native ``POST /generate`` (token ids in;
  ``meta_info.output_token_logprobs``, ``finish_reason``, ``weight_version`` out) whose
  tokens come from the gateway's scripted engine, driven by a rule on the decoded prompt.
- ``args``: a namespace with the slime arguments rollhub-slime reads.

Stand-ins for slime's side (its arguments, its data source, the recorded facts) are in
:mod:`tests.plugins.slime.slime_stand_ins`; the SGLang server is
:mod:`tests.plugins.slime.sglang_loopback`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.plugins.slime.sglang_loopback import Script, SGLangState, serve_sglang
from tests.plugins.slime.slime_stand_ins import MODEL, STUB


@pytest.fixture(autouse=True)
def slime_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``import slime`` find the stand-in package for this test only."""
    monkeypatch.syspath_prepend(str(STUB))
    yield
    for name in [m for m in sys.modules if m == "slime" or m.startswith("slime.")]:
        del sys.modules[name]


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from rollhub_gateway.models import load_tokenizer

    return load_tokenizer(MODEL)


@pytest.fixture
def script(tokenizer: Any) -> Script:
    return Script(tokenizer)


@pytest.fixture
def sglang(script: Script) -> Iterator[SGLangState]:
    """The loopback SGLang server for one test."""
    with serve_sglang(script) as state:
        yield state

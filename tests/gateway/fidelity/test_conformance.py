"""The conformance run: every family, real templates, scripted multi-turn tool sessions."""

from __future__ import annotations

import pytest
from rollhub_gateway.conformance import (
    APPEND_ONLY,
    CONFORMANCE_FAMILIES,
    main,
    run_family,
    run_family_http,
)


@pytest.mark.parametrize("name", sorted(CONFORMANCE_FAMILIES))
def test_family_session_keeps_every_sampled_token(name, family_model):
    report = run_family(name, family_model(name))
    assert report.ok, report.failures
    assert report.sampled > 0 and report.in_records == report.sampled
    if name in APPEND_ONLY:
        assert report.counts["rerender"] == report.counts["fork"] == 0
        assert report.counts["append"] == report.turns


@pytest.mark.parametrize("name", sorted(CONFORMANCE_FAMILIES))
def test_family_session_through_the_http_api(name, family_model):
    # the real gateway on 127.0.0.1, driven by the openai SDK
    model = family_model(name)
    http = run_family_http(name, model)
    assert http.ok, http.failures
    assert http.counts == run_family(name, model).counts


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1", "glm4_moe", "gpt_oss"])
def test_reasoning_templates_rerender_only_after_a_new_user_message(name, family_model):
    # these templates drop earlier reasoning once a new user query arrives; tool loops
    # in between must stay append-only (deepseek_v3 also rewrites inside tool loops)
    report = run_family(name, family_model(name))
    assert report.counts["rerender"] == 2 and report.counts["fork"] == 0
    assert report.counts["masked_tokens"] > 0


def test_main_prints_the_table(capsys):
    assert main(["--family", "qwen2_5", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| family | via | parser | turns |")
    assert "| qwen2_5 | direct | hermes | 6 | 6 | 0 | 0 | 0 |" in out
    assert "| qwen2_5 | http | hermes | 6 | 6 | 0 | 0 | 0 |" in out

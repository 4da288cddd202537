"""The Tinker backend through the real tinker SDK against a loopback of the hosted API
(:mod:`tests.tinker_loopback`: the routes the SDK itself calls, in the shapes of its types)."""

from __future__ import annotations

import pydantic
import pytest
from aiohttp import web
from rollhub.errors import GatewayError
from rollhub.sampling import SamplingParams
from rollhub_gateway.engines.tinker import TinkerBackend, TinkerOptions

from tests.tinker_loopback import TinkerLoopback

PROMPT = [1, 4093, 314, 2]


@pytest.fixture
async def tinker_server(fakes):
    state = TinkerLoopback()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    runner, url = await fakes.serve(app)
    state.url = url
    yield state
    await runner.cleanup()


@pytest.fixture
async def backend(tinker_server):
    b = TinkerBackend(
        TinkerOptions(
            base_url=tinker_server.url,
            api_key="tml-secret",
            base_model="smol-135m",
            weight_version=3,
        )
    )
    yield b
    await b.close()


async def test_sample_through_the_sdk(
    backend: TinkerBackend, tinker_server: TinkerLoopback
) -> None:
    gen = await backend.generate(
        PROMPT, SamplingParams(max_tokens=5, temperature=0.7, top_p=0.9, top_k=20, seed=11)
    )
    expected = tinker_server.sample(tinker_server.futures["req-0"])["sequences"][0]
    assert gen.token_ids == expected["tokens"] and len(gen.token_ids) == 5
    assert gen.logprobs == pytest.approx(expected["logprobs"])
    assert gen.finish_reason == "length" and gen.weight_version == 3
    paths = tinker_server.paths()
    assert paths.index("/api/v1/create_sampling_session") < paths.index("/api/v1/asample")
    assert paths.count("/api/v1/retrieve_future") >= 2  # polled through try_again
    calls = {p: (d, h) for p, d, h in tinker_server.calls}
    session, _ = calls["/api/v1/create_sampling_session"]
    assert session["base_model"] == "smol-135m" and session["session_id"] == "sess-1"
    sample, headers = calls["/api/v1/asample"]
    assert headers["X-API-Key"] == "tml-secret"
    assert sample["prompt"]["chunks"] == [{"tokens": PROMPT, "type": "encoded_text"}]
    assert sample["sampling_session_id"] == "samp-1" and sample["num_samples"] == 1
    assert sample["sampling_params"] == {
        "max_tokens": 5,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "seed": 11,
    }


async def test_stop_ids_reach_the_sampler(backend: TinkerBackend, tinker_server) -> None:
    free = await backend.generate(PROMPT, SamplingParams(max_tokens=6))
    stop_at = free.token_ids[2]
    gen = await backend.generate(PROMPT, SamplingParams(max_tokens=6, stop_token_ids=(stop_at,)))
    assert gen.finish_reason == "stop" and gen.token_ids == free.token_ids[:3]
    assert tinker_server.futures["req-1"]["sampling_params"]["stop"] == [stop_at]
    # the sampling session is created once and reused
    assert tinker_server.paths().count("/api/v1/create_sampling_session") == 1


async def test_failed_request_maps_to_gateway_error(backend: TinkerBackend, tinker_server) -> None:
    tinker_server.fail = "prompt too long"
    with pytest.raises(GatewayError, match="prompt too long") as info:
        await backend.generate(PROMPT, SamplingParams(max_tokens=4))
    assert info.value.unreachable is False and info.value.__cause__ is not None


async def test_stop_strings_and_ids_together_are_refused(backend: TinkerBackend) -> None:
    with pytest.raises(GatewayError, match="stop_token_ids"):
        await backend.generate(PROMPT, SamplingParams(stop=("x",), stop_token_ids=(2,)))


def test_options_need_a_model() -> None:
    with pytest.raises(pydantic.ValidationError, match="model_path"):
        TinkerOptions(base_url="http://127.0.0.1:1")
    assert TinkerOptions(model_path="tinker://run/sampler_weights/1").api_key is None
    assert "secret" not in repr(TinkerOptions(base_model="m", api_key="tml-secret"))

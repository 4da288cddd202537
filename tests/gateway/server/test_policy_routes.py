"""Several policies behind one gateway: routing by model name, the 400 for an unknown one,
per-policy records and weight versions, and frozen policies that take no weights."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from rollhub.errors import UsageError
from rollhub.policies import PolicyUpdate, PolicyUpdates
from rollhub_gateway.engines.scripted import ScriptedBackend
from rollhub_gateway.gateway import Gateway
from rollhub_gateway.policies.routes import PolicyRoute

USER = [{"role": "user", "content": "Draft the call."}]


class Weighted(ScriptedBackend):
    """A scripted backend that keeps what the trainer published to it."""

    def __init__(self) -> None:
        super().__init__()
        self.published: list[tuple[Any, int]] = []

    def update_policy(self, policy: Any, weight_version: int) -> None:
        self.published.append((policy, weight_version))


@pytest.fixture
async def two(chat_model: Any, config: Any) -> Any:
    """A gateway serving 'proposer' and 'checker' (trainable) and 'judge' (frozen)."""
    backends = {"proposer": Weighted(), "checker": Weighted(), "judge": Weighted()}
    routes = [
        PolicyRoute("proposer", "proposer", backends["proposer"], True, 0),
        PolicyRoute("checker", "checker-v1", backends["checker"], True, 0),
        PolicyRoute("judge", "judge", backends["judge"], False, 0),
    ]
    gw = Gateway(backends["proposer"], chat_model, config, routes=routes)
    await gw.start()
    try:
        yield gw, backends
    finally:
        await gw.close()


async def test_each_call_is_served_by_the_policy_its_model_names(two, ids):
    gw, backends = two
    s = gw.open_session("route-1")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    backends["proposer"].add(ids("calculator(47 * 386)"))
    backends["checker"].add(ids("ACCEPT"))
    first = await client.chat.completions.create(model="proposer", messages=USER)
    check = [
        {"role": "system", "content": "You check calls."},
        {"role": "user", "content": first.choices[0].message.content},
    ]
    second = await client.chat.completions.create(model="checker-v1", messages=check)
    assert (first.model, second.model) == ("proposer", "checker-v1")
    assert len(backends["proposer"].prompts) == len(backends["checker"].prompts) == 1
    assert backends["judge"].prompts == []
    records = gw.traces("route-1")
    assert sorted(r.policy for r in records) == ["checker", "proposer"]
    for r in records:
        assert [t.policy for t in r.turns] == [r.policy]


async def test_turns_carry_their_own_policys_weight_version(two, ids):
    gw, backends = two
    gw.publish_policy(
        PolicyUpdates(
            {
                "proposer": PolicyUpdate({"w": 1}, 3),
                "checker": PolicyUpdate(None, 1),
                "judge": PolicyUpdate(None, 0),
            }
        ),
        3,
    )
    s = gw.open_session("versions")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    for name in ("proposer", "checker", "judge"):
        backends[name].add(ids(f"from {name}"))
    for model in ("proposer", "checker-v1", "judge"):
        await client.chat.completions.create(model=model, messages=USER)
    versions = {r.policy: [t.weight_version for t in r.turns] for r in gw.traces("versions")}
    assert versions == {"proposer": [3], "checker": [1], "judge": [0]}
    assert backends["proposer"].published == [({"w": 1}, 3)]
    assert backends["checker"].published == []  # only its version moved
    assert [t.weight_version for t in backends["judge"].turns] == [0]


async def test_a_frozen_policy_takes_no_new_weights(two):
    gw, backends = two
    with pytest.raises(UsageError, match="'judge' is frozen"):
        gw.publish_policy(PolicyUpdates({"judge": PolicyUpdate({"w": 2}, 1)}), 1)
    assert backends["judge"].published == []


async def test_an_unknown_model_is_a_400_listing_the_policies(two, ids):
    gw, backends = two
    s = gw.open_session("unknown")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(model="gpt-4o", messages=USER)
    message = str(err.value)
    assert "model 'gpt-4o' is not served here" in message
    for shown in (
        "'proposer' (model 'proposer')",
        "'checker' (model 'checker-v1')",
        "'judge' (model 'judge', frozen)",
    ):
        assert shown in message
    assert err.value.body["param"] == "model"  # type: ignore[index]
    assert all(b.prompts == [] for b in backends.values())  # nothing was sampled
    assert gw.traces("unknown") == []


async def test_anthropic_callers_get_the_400_in_their_format(two):
    gw, _ = two
    s = gw.open_session("unknown-anthropic")
    client = anthropic.AsyncAnthropic(base_url=gw.url, api_key=s.key, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="not served here"):
        await client.messages.create(model="claude", max_tokens=8, messages=USER)


async def test_models_route_lists_every_policy(two):
    gw, _ = two
    s = gw.open_session("list")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    listed = [m.id async for m in client.models.list()]
    assert listed == ["proposer", "checker-v1", "judge"]


async def test_a_policys_turns_never_continue_another_policys_record(two, ids):
    """The checker re-sends the proposer's conversation plus one message: its turn starts
    a record of its own instead of continuing the proposer's."""
    gw, backends = two
    s = gw.open_session("no-mix")
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key=s.key)
    backends["proposer"].add(ids("draft"))
    backends["checker"].add(ids("ACCEPT"))
    first = await client.chat.completions.create(model="proposer", messages=USER)
    extended = [
        *USER,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Check it."},
    ]
    await client.chat.completions.create(model="checker-v1", messages=extended)
    records = {r.policy: r for r in gw.traces("no-mix")}
    assert set(records) == {"proposer", "checker"}
    checker = records["checker"]
    assert checker.turns[0].drift == "fork"
    # the proposer's sampled ids are context (mask 0) in the checker's record, never its own
    assert sum(checker.response_mask) == len(ids("ACCEPT"))


async def test_one_policy_gateways_still_take_any_model_name(gateway, scripted, ids):
    s = gateway.open_session("any")
    client = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=s.key)
    scripted.add(ids("ok"))
    await client.chat.completions.create(model="whatever-the-agent-says", messages=USER)
    (record,) = gateway.traces("any")
    assert record.policy is None and record.turns[0].policy is None
    assert not gateway.policies.routed

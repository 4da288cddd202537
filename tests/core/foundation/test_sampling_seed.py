"""A ``seed`` in ``[experiment] sampling`` is refused, and each episode samples with its own
seed: a fixed seed made every sample of a prompt draw the same tokens (groups without
spread, nothing learned) while the episode recorded a seed that was never used."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from rollhub.config import parse_config
from rollhub.errors import ConfigError
from rollhub.seeding import SEED_KEY, EpisodeSeeds, session_sampling


def _request(sampling: dict[str, Any]) -> Any:
    return SimpleNamespace(extras={}, rollout=SimpleNamespace(sampling=dict(sampling)))


def test_a_seed_in_experiment_sampling_is_refused_naming_the_fix() -> None:
    data = {"experiment": {"seed": 1, "sampling": {"temperature": 0.7, "seed": 7}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(data, env={})
    message = str(caught.value)
    assert "experiment.sampling.seed" in message and "set experiment.seed" in message
    assert caught.value.field == "experiment.sampling"
    # from the environment too, and blamed on the variable
    with pytest.raises(ConfigError, match="ROLLHUB_EXPERIMENT__SAMPLING"):
        parse_config({}, env={"ROLLHUB_EXPERIMENT__SAMPLING": "{ seed = 7 }"})
    # every other sampling option stays accepted
    cfg = parse_config({"experiment": {"sampling": {"temperature": 0.7, "top_p": 0.9}}}, env={})
    assert cfg.experiment.sampling == {"temperature": 0.7, "top_p": 0.9}


def test_the_session_samples_with_the_episodes_own_seed() -> None:
    seeds = EpisodeSeeds(1)
    used = []
    for index in range(4):
        # a seed that reached the rollout's sampling anyway (e.g. a caller's override)
        request = _request({"temperature": 0.7, "seed": 7})
        assigned = seeds.assign(request, "prompt-1", index)
        sampling = session_sampling(request)
        assert sampling["seed"] == assigned == request.extras[SEED_KEY]
        assert sampling["temperature"] == 0.7
        used.append(sampling["seed"])
    assert len(set(used)) == 4  # every sample draws its own numbers
    # a retry keeps the first attempt's seed
    first, retry = _request({"seed": 7}), _request({"seed": 7})
    seeds.assign(first, "prompt-2", 0)
    assert session_sampling(retry, first)["seed"] == first.extras[SEED_KEY]
    # without an episode seed (a caller that assigns none) the rollout's sampling stands
    assert session_sampling(_request({"seed": 7}))["seed"] == 7

"""The worker hub's hosting key and the row's sampling binding (the hosting itself, one
hub per process closed at exit on its own loop, is rollhub.hubs.hosted's; see
tests/core/pipeline/test_hosted_hub.py)."""

from __future__ import annotations

import os

from rollhub_verl import worker_hub
from rollhub_verl.worker_hub import hub_key, verl_sampling


def test_one_hosting_key_per_config_file(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    key = hub_key(tmp_path / "rollhub.toml")
    assert (
        key == hub_key("../rollhub.toml") == hub_key(os.path.join("..", "a", "..", "rollhub.toml"))
    )
    assert key.startswith("rollhub_verl:") and key != hub_key(tmp_path / "other.toml")


def test_sampling_binding_lasts_as_long_as_the_block():
    from types import SimpleNamespace

    from rollhub_verl.backend import binding

    hook = worker_hub._SessionSampling()
    request = SimpleNamespace(rollout=SimpleNamespace(session_id="g-0-x"))
    hook.rollhub_prepare_rollout(request)  # outside a block: nothing bound
    assert "g-0-x" not in binding().sessions
    try:
        with verl_sampling({"temperature": 0.0}):
            hook.rollhub_prepare_rollout(request)
            assert binding().sessions["g-0-x"] == {"temperature": 0.0}
            raise KeyboardInterrupt  # a cancelled episode still unbinds
    except KeyboardInterrupt:
        pass
    assert "g-0-x" not in binding().sessions

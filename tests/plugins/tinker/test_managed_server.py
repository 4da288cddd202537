"""``[trainer] local_server = true``: ``rollhub run`` starts the Tinker-compatible server
itself and never leaves it behind, whether the run ends, fails, or is killed.

The real server (skyrl, JAX on CPU) in its real environment; ``rollhub run`` as a real
process for the signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rollhub.registry import ComponentContext
from rollhub_tinker.local_server import SetupInfo
from rollhub_tinker.trainer import TinkerTrainer, TinkerTrainerOptions

from tests.plugins.tinker import local_server as fixtures
from tests.plugins.tinker.test_local_server import _processes_mentioning

pytestmark = pytest.mark.slow

tinker_local_env = fixtures.tinker_local_env
AGENT = Path(__file__).resolve().parents[2] / "core" / "training" / "agents" / "policy_agent.py"
ROLLHUB = Path(sys.executable).parent / "rollhub"


def _trainer(run_dir: Path, **options) -> TinkerTrainer:
    return TinkerTrainer(TinkerTrainerOptions(local_server=True, lora_rank=4, **options),
                         context=ComponentContext(run_dir=run_dir))


def _gone(marker: str, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while _processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _processes_mentioning(marker)


def test_the_trainer_starts_its_server_once_and_stops_it(
    tinker_local_env: SetupInfo, tmp_path: Path
) -> None:
    trainer = _trainer(tmp_path)
    state = str(tmp_path / "tinker-local")

    async def life() -> None:
        await trainer.start()
        assert trainer.server is not None and trainer.server.running
        assert trainer.options.base_url == trainer.server.base_url
        assert len(_processes_mentioning(state)) >= 1
        await trainer.close()

    asyncio.run(life())
    assert trainer.server is None and _gone(state)


def test_a_failed_start_stops_the_server_it_started(
    tinker_local_env: SetupInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the server is up, then asking it for its model fails: the trainer must not leave it
    async def refuse(self: TinkerTrainer) -> str:
        assert self.server is not None and self.server.running
        raise RuntimeError("the server answered nonsense")

    monkeypatch.setattr(TinkerTrainer, "_only_model", refuse)
    trainer = _trainer(tmp_path)
    with pytest.raises(RuntimeError, match="nonsense"):
        asyncio.run(trainer.start())
    assert trainer.server is None
    assert _gone(str(tmp_path / "tinker-local"))


def test_local_server_and_base_url_together_are_refused(tmp_path: Path) -> None:
    from rollhub.errors import ConfigError

    trainer = _trainer(tmp_path, base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="local_server"):
        asyncio.run(trainer.start())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_run_leaves_no_server_behind(
    tinker_local_env: SetupInfo, tmp_path: Path, sig: signal.Signals
) -> None:
    (tmp_path / "data.jsonl").write_text('{"id": "q0"}\n{"id": "q1"}\n')
    (tmp_path / "rollhub.toml").write_text(f"""
[experiment]
name = "managed"
dataset = "data.jsonl"
n_samples = 2
progress = false
[runtime]
name = "local"
app = "{AGENT}:app"
workers = 1
[store]
url = "file://{tmp_path / 'store'}"
[token_source]
name = "gateway"
model = "smollm2-135m-instruct"
engine = {{ name = "tinker", options = {{ from_trainer = true }} }}
[trainer]
name = "tinker"
local_server = true
lora_rank = 4
[training]
batch_groups = 1
steps = 2
""")
    run_dir = tmp_path / "run"
    env = {**os.environ, "ROLLHUB_TINKER_LOCAL_DIR": str(tinker_local_env.env_dir)}
    process = subprocess.Popen(
        [str(ROLLHUB), "run", str(tmp_path / "rollhub.toml"), "--run-dir", str(run_dir)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    ready = run_dir / "tinker-local" / "engine.ready"
    try:
        deadline = time.monotonic() + 300
        while not ready.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.5)
        assert ready.exists(), "the run did not bring its server up"
        assert _processes_mentioning(str(run_dir / "tinker-local"))
        process.send_signal(sig)
        process.wait(timeout=30)
        assert _gone(str(run_dir / "tinker-local"))
    finally:
        if process.poll() is None:
            process.kill()
        for pid in _processes_mentioning(str(run_dir / "tinker-local")):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

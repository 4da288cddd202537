"""Sessions over A2A in podman containers: the image ``rollhub deploy init`` builds for the
calculator agent, one container per episode.

- The main job's short form (2 steps of one group of 4, no held-out evaluation) through
  the ``a2a`` runtime (``examples/math/train-a2a.toml``): every episode a session in its own
  container, its phase seconds in the run's episodes and in ``rollhub view``'s API.
- Cross tests against agentcore-rl-toolkit 0.1.4 in containers: its A2A session client
  drives the rollhub agent's container, and rollhub's ``a2a`` runtime drives 0.1.4's
  executor agent in a container (the base image, with the 0.1.4 environment mounted).

Images are tagged by content hash and reused (:mod:`tests.deploy_image.engine`); skipped,
with the reason, where podman is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from rollhub.a2a.transports import ContainerTransport
from rollhub.a2a.wire import INSTANCE_HEADER
from rollhub.testing import make_hub

from tests.compat.upstream_venv import upstream_python
from tests.deploy_image.engine import EngineMissing, Podman, base_image, find_podman, host_arch
from tests.deploy_image.test_agent_image import build_agent_image

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "math"
AGENT_FILES = Path(__file__).with_name("a2a_agent")
CONFIG = EXAMPLES / "train-a2a.toml"
ROLLHUB = Path(sys.executable).parent / "rollhub"
DRIVER = ROOT / "tests" / "compat" / "upstream_a2a_driver.py"

SHORT = {
    "ROLLHUB_TRAINING__STEPS": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "1",
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "0",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "4",
    "ROLLHUB_EVAL__BEFORE_TRAINING": "false",
    "ROLLHUB_EVAL__AFTER_TRAINING": "false",
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Podman:
    try:
        return find_podman(tmp_path_factory.mktemp("podman"))
    except EngineMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def image(engine: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The agent image: the calculator agent (and a model-free one) with rollhub[a2a]."""
    work = tmp_path_factory.mktemp("a2a-image")
    project = work / "project"
    shutil.copytree(AGENT_FILES, project)
    for name in ("agent.py", "calc_agent.py"):
        shutil.copy(EXAMPLES / name, project / name)
    try:
        tag, _ = build_agent_image(engine, host_arch(), work, agent_dir=project,
                                   app="calc_agent.py:app", name="rollhub-test-a2a-agent")  # fmt: skip
    except EngineMissing as exc:
        pytest.skip(str(exc))
    return tag


def _containers(engine: Podman, prefix: str) -> list[str]:
    names = engine("ps", "-a", "--format", "{{.Names}}").stdout.split()
    return [n for n in names if n.startswith(prefix)]


def test_two_training_steps_through_a2a_sessions_in_containers(engine, image, tmp_path):
    env = {**os.environ, **SHORT, "CONTAINERS_CONF": engine.env["CONTAINERS_CONF"],
           "ROLLHUB_RUNTIME__IMAGE": json.dumps(image),
           "ROLLHUB_STORE__URL": json.dumps(f"file://{tmp_path / 'store'}")}  # fmt: skip
    run = tmp_path / "run"
    started = time.monotonic()
    out = subprocess.run(
        [str(ROLLHUB), "run", str(CONFIG), "--run-dir", str(run), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    took = time.monotonic() - started
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1] and steps[-1]["weight_version"] == 2
    rows = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    phases = [json.loads(r["metrics"])["session"] for r in rows]
    assert all({"setup_s", "run_s", "shutdown_s"} <= set(p) for p in phases)
    assert any(r["status"] == "ok" and r["num_turns"] > 0 for r in rows)
    assert not _containers(engine, "rollhub-a2a-")  # every session's container is gone
    from rollhub.testing.servers import serve_app
    from rollhub_view.run_dir import RunDir
    from rollhub_view.server import LOOPBACK_HOSTS, ViewState, make_app

    state = ViewState([RunDir(run)])
    state.refresh()
    with serve_app(make_app(state, allowed_hosts=LOOPBACK_HOSTS)) as view:
        shown = httpx.get(f"{view}/api/runs/0/episodes/0", timeout=30).json()
    assert shown["session"] == phases[0]  # rollhub view shows each episode's phases
    setup = sorted(p["setup_s"] for p in phases)
    print(
        f"8 episodes in 2 steps, {took:.0f} s; container setup median "
        f"{setup[len(setup) // 2]:.2f} s, max {setup[-1]:.2f} s"
    )


def test_014_session_client_drives_the_rollhub_agent_in_a_container(engine, image, tmp_path):
    python014 = str(upstream_python())

    async def run() -> list[dict]:
        transport = ContainerTransport(
            name="rollhub-x014-agent", image=image, app="sum_agent:app", engine=engine.executable,
            cli_env={"CONTAINERS_CONF": engine.env["CONTAINERS_CONF"]},
        )  # fmt: skip
        url, _ = await transport.start()
        try:
            # the container says which session it serves (a port clash is caught by it)
            assert httpx.get(f"{url}ping").headers[INSTANCE_HEADER] == transport.name
            tasks = [
                {"id": "p1", "a": 2, "b": 3, "answer": 5},
                {"id": "p2", "a": 2, "b": 2, "answer": 5},
            ]
            done = await asyncio.to_thread(
                subprocess.run, [python014, str(DRIVER), "url", url], input=json.dumps(tasks),
                capture_output=True, text=True, timeout=240, env=dict(os.environ),
            )  # fmt: skip
        finally:
            await transport.stop()
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    out = asyncio.run(run())
    assert [o["dump"]["reward"] for o in out] == [1.0, 0.0]
    first = out[0]["dump"]["task_output"]
    assert first["prepared"] == "workspace for 2.0+3.0" and first["uid"] == 10001


async def test_rollhub_runtime_drives_a_014_executor_agent_in_a_container(engine, tmp_path):
    venv = Path(upstream_python()).parents[1]
    base = Path(sys.base_prefix)  # the interpreter the 0.1.4 environment was made from
    tag = base_image(engine, host_arch(), tmp_path)
    transport = ContainerTransport(
        name="rollhub-x014-upstream", image=tag, app="", engine=engine.executable,
        cli_env={"CONTAINERS_CONF": engine.env["CONTAINERS_CONF"]}, network="slirp4netns",
        run_args=["-v", f"{base}:{base}:ro", "-v", f"{venv}:{venv}:ro",
                  "-v", f"{DRIVER.parent}:/driver:ro"],
        command=[str(venv / "bin" / "python"), "/driver/upstream_a2a_driver.py", "agent",
                 "0.0.0.0", "9000"],
    )  # fmt: skip
    url, _ = await transport.start()
    try:
        config = {
            "experiment": {"name": "x014c", "n_samples": 2, "concurrency": 2, "timeout_s": 60,
                           "progress": False},
            "runtime": {"name": "a2a", "target": "url", "url": url},
            "store": {"url": f"file://{tmp_path / 'store'}"},
            "trainer": {"name": "export"},
        }  # fmt: skip
        async with make_hub(config, run_dir=tmp_path / "run") as hub:
            group = await hub.run_group({"id": "p1", "a": 2, "b": 3, "answer": 5})
        ping = httpx.get(f"{url}ping").json()["status"]
    finally:
        await transport.stop()
    assert [e.status for e in group.episodes] == ["ok", "ok"]
    assert [e.reward for e in group.episodes] == [1.0, 1.0] and ping == "Healthy"


def test_compat_docker_a2a_session_runs_an_image_serving_a2a(engine, image, tmp_path, monkeypatch):
    """make_session("docker_a2a") with podman as the CLI: the image's own command serves A2A
    on port 9000 (here an image derived from the agent's, with that command)."""
    from rollhub.compat import (
        LocalPriorityAssigner,
        LocalPrioritySemaphore,
        NullPersister,
        PersistentDict,
        RolloutSessionBounds,
        make_session,
        run_rollout_with_bounds,
    )  # fmt: skip

    derived = f"{image.split(':')[0]}-a2a-cmd:{image.split(':')[1]}"
    if not engine.image_exists(derived):
        (tmp_path / "Containerfile").write_text(
            f"FROM {image}\n"
            'CMD ["python", "-m", "rollhub.a2a", "sum_agent:app", "--host", "0.0.0.0", '
            '"--port", "9000"]\n'
        )
        engine("build", "--network", "none", "-t", derived, str(tmp_path))
    monkeypatch.setenv("ROLLHUB_CONTAINER_ENGINE", engine.executable)
    monkeypatch.setenv("CONTAINERS_CONF", engine.env["CONTAINERS_CONF"])
    cfg = {"backend": "docker_a2a", "agent_image_uri": derived, "docker_iam_role_arn": "",
           "docker_log_group": "/agents", "docker_log_region": "us-west-2"}  # fmt: skip
    bounds = RolloutSessionBounds(
        container_semaphore=LocalPrioritySemaphore(2), rollout_semaphore=LocalPrioritySemaphore(2),
        container_priority_assigner=LocalPriorityAssigner(),
        rollout_priority_assigner=LocalPriorityAssigner(),
        container_setup_timeout=120, agent_run_timeout=60,
    )  # fmt: skip
    state = PersistentDict(persister=NullPersister())
    sid = "rollhub-compat-docker-" + "0" * 16
    dump = asyncio.run(run_rollout_with_bounds(
        state, bounds, "g1", make_session(sid, cfg, state), {"a": 2, "b": 3, "answer": 5}
    ))  # fmt: skip
    assert dump.is_successful() and dump.reward == 1.0
    assert dump.task_output["uid"] == 10001 and dump.task_output["types"]["a"] == "int"
    assert state["endpoint"].startswith("http://127.0.0.1:")
    assert not _containers(engine, sid)  # torn down

"""The repair environment (``examples/repair``): generated workspaces, a check that scores
the workspace (never the reply), and both agents (Strands, LangGraph) driving a real local
sandbox through the real gateway. The model here is scripted; the real model trains the
Strands agent in ``test_repair_trains.py``."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from rollhub.client import AsyncRolloutClient
from rollhub.config import load_config
from rollhub.runtimes.local import LocalRuntime
from rollhub_sandbox import SandboxClient

from tests.examples.math_example import MODEL

REPAIR = Path(__file__).parents[2] / "examples" / "repair"
sys.path.insert(0, str(REPAIR))

from tasks import check_command, dataset_rows, make_task  # noqa: E402


def test_a_task_is_made_from_its_seed_and_hides_what_must_be_found() -> None:
    for depth in (1, 2, 3):
        task = make_task(17, depth)
        assert task == make_task(17, depth) and task.split == f"depth-{depth}"
        assert task.files[task.place].strip() == task.wrong != task.value
        if depth == 1:  # the prompt says where and what
            assert task.place in task.prompt and task.value in task.prompt
        else:  # it says neither: the check (or, at depth 3, a note it names) must be read
            assert task.place not in task.prompt and task.value not in task.prompt
        assert (task.note is not None) == (depth == 3)
        if task.note:
            assert task.value not in task.files["check.sh"]
            assert task.files[task.note].strip() == task.value
    workspaces = {repr(sorted(make_task(s, 2).files.items())) for s in range(50)}
    assert len(workspaces) == 50
    with pytest.raises(ValueError, match="depth"):
        make_task(1, 4)
    rows = dataset_rows(range(3), (1, 2))
    assert [r["id"] for r in rows[:2]] == ["repair-d1-00000", "repair-d2-00000"]


@pytest.fixture(scope="module")
def sandboxes() -> Any:
    with SandboxClient("local", isolation="auto") as client:
        yield client


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_the_check_scores_the_workspace_and_nothing_else(sandboxes: Any, depth: int) -> None:
    task = make_task(5, depth)
    with sandboxes.start() as sb:
        for path, content in task.files.items():
            sb.write_file(path, content)
        assert sb.exec(check_command(task)).exit_code == 1
        shown = sb.exec("sh check.sh")
        assert shown.exit_code == 1 and task.place in shown.stdout
        assert (task.note or task.value) in shown.stdout  # what the agent learns by running it
        # gaming the workspace's own check or the note earns nothing
        sb.write_file("check.sh", "exit 0\n")
        if task.note:
            sb.write_file(task.note, f"{task.wrong}\n")
        assert sb.exec("sh check.sh").exit_code == 0
        assert sb.exec(check_command(task)).exit_code == 1
        assert sb.exec(f"echo {task.value} > {task.place}").exit_code == 0
        result = sb.exec(check_command(task))
        assert result.exit_code == 0 and f"PASS: {task.place} is {task.value}" in result.stdout


@pytest.mark.parametrize("agent", ["strands_agent.py", "langgraph_agent.py"])
async def test_each_agent_acts_in_its_sandbox_and_is_scored_by_the_check(
    agent: str, gateway: Any, scripted: Any, ids: Any, tmp_path: Path
) -> None:
    task = make_task(11, 2)
    scripted.add(
        ids.tool_call("shell", {"command": "sh check.sh"}),
        ids.tool_call("shell", {"command": f"echo {task.value} > {task.place}"}),
        ids.text("The check passes now."),
    )
    sid = f"rh-{uuid.uuid4().hex}"
    session = gateway.open_session(sid)
    runtime = LocalRuntime(app=f"{REPAIR / agent}:app", workers=1)
    async with AsyncRolloutClient(
        runtime, f"file://{tmp_path}", exp_id="exp", close_runtime=True
    ) as client:
        outcome = await client.invoke(
            {"id": "t", "seed": 11, "depth": 2, "split": "depth-2"},
            session_id=sid, base_url=gateway.base_url, api_key=session.key, model_id=MODEL,
            sampling={"max_tokens": 64, "temperature": 0.7}, timeout=120,
        )
    assert outcome.status == "ok", outcome.error
    result = outcome.result
    assert result["rewards"] == 1.0 and result["check"]["exit_code"] == 0
    assert [c["command"] for c in result["metrics"]["commands"]] == [
        "sh check.sh", f"echo {task.value} > {task.place}"]
    assert result["split"] == "depth-2" and result["metrics"]["sandbox"] == "local"
    (record,) = gateway.traces(sid)
    assert len(record.turns) == 3
    masked = ids.tok.decode([t for t, m in zip(record.response_ids, record.response_mask,
                                                strict=True) if not m])
    # the sandbox's answer to the first command reached the model as tool tokens, masked
    assert f"exit code 1\nFAIL: {task.place} holds '{task.wrong}'" in masked


async def test_a_reply_without_acting_scores_zero(
    gateway: Any, scripted: Any, ids: Any, tmp_path: Path
) -> None:
    task = make_task(12, 1)
    scripted.add(ids.text(f"Done: {task.place} holds {task.value}."))  # says so, did nothing
    sid = f"rh-{uuid.uuid4().hex}"
    session = gateway.open_session(sid)
    runtime = LocalRuntime(app=f"{REPAIR / 'strands_agent.py'}:app", workers=1)
    async with AsyncRolloutClient(
        runtime, f"file://{tmp_path}", exp_id="exp", close_runtime=True
    ) as client:
        outcome = await client.invoke(
            {"id": "t", "seed": 12, "depth": 1}, session_id=sid, base_url=gateway.base_url,
            api_key=session.key, model_id=MODEL, sampling={"max_tokens": 64}, timeout=120,
        )
    assert outcome.status == "ok", outcome.error
    assert outcome.result["rewards"] == 0.0 and outcome.result["check"]["exit_code"] == 1
    assert outcome.result["metrics"]["commands"] == []


@pytest.mark.parametrize("name", ["train.toml", "train-langgraph.toml", "train-podman.toml",
                                  "rollouts.toml"])
def test_each_config_is_valid(name: str) -> None:
    cfg = load_config(REPAIR / name)
    assert (REPAIR / cfg.runtime.options["app"].split(":")[0]).is_file()
    assert cfg.path(cfg.experiment.dataset).is_file()


def test_failures_are_named_by_the_first_missing_step() -> None:
    from failures import failure_cause, failure_table

    d1, d2, d3 = make_task(5, 1), make_task(5, 2), make_task(5, 3)

    def held(task: Any, value: str) -> str:
        return f"FAIL: {task.place} holds '{value}'; it must hold {task.value}"

    assert failure_cause(d1, [], held(d1, d1.wrong)) == "no command"
    assert failure_cause(d2, [f"echo 1 > {d2.place}"], held(d2, "1")) == "never ran the check"
    assert failure_cause(d3, ["sh check.sh"], held(d3, d3.wrong)) == "never read the note"
    assert failure_cause(d2, ["sh check.sh"] * 3, held(d2, d2.wrong)) == "never wrote"
    assert failure_cause(d2, ["sh check.sh", "echo 1 > limit"], held(d2, d2.wrong)) == (
        "wrote another file")
    assert failure_cause(d1, [f"rm {d1.place}"], held(d1, "")) == "setting emptied"
    assert failure_cause(d3, ["sh check.sh", f"cat {d3.note}", f"echo 7 > {d3.place}"],
                         held(d3, "7")) == "wrong value"
    rows = [
        {"status": "ok", "reward": 1.0, "payload": '{"seed": 5, "depth": 1}', "result": "{}"},
        {"status": "ok", "reward": 0.0, "payload": {"seed": 5, "depth": 2},
         "result": {"check": {"output": held(d2, d2.wrong)},
                    "metrics": {"commands": [{"command": "sh check.sh", "exit_code": 1}]}}},
        {"status": "agent_error", "payload": {"seed": 5, "depth": 2}},  # not a finished episode
    ]
    assert failure_table(rows) == {"depth-1": {"success": 1}, "depth-2": {"never wrote": 1}}

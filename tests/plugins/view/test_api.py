"""The server's JSON API against a real server on 127.0.0.1 (httpx), and the command."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from rollhub.cli import build_parser
from rollhub_view.synthetic import episode_row, metrics_row


def test_runs_report_kind_status_and_counts(serve, synthetic: Path):
    s = serve(synthetic)
    runs = httpx.get(f"{s.url}/api/runs").json()["runs"]
    assert len(runs) == 1
    r = runs[0]
    assert (r["kind"], r["status"], r["steps_done"], r["steps_total"], r["episodes"]) == (
        "training", "finished", 3, 3, 48)
    metrics = httpx.get(f"{s.url}/api/runs/0/metrics?since=1").json()
    assert metrics["total"] == 3 and [m["step"] for m in metrics["rows"]] == [1, 2]


def test_the_table_is_filtered_sorted_and_paged_on_the_server(serve, synthetic: Path):
    s = serve(synthetic)
    body = httpx.get(f"{s.url}/api/runs/0/episodes",
                     params={"step": 2, "sort": "reward", "desc": 1, "size": 5}).json()
    assert body["total"] == 16 and body["episodes"] == 48 and len(body["rows"]) == 5
    assert all(r["step"] == 2 for r in body["rows"])
    rewards = [r["reward"] for r in body["rows"] if r["reward"] is not None]
    assert rewards == sorted(rewards, reverse=True)
    facets = httpx.get(f"{s.url}/api/runs/0/facets").json()
    assert facets["steps"] == [0, 1, 2] and "ok" in facets["statuses"]
    bad = httpx.get(f"{s.url}/api/runs/0/episodes", params={"step": "x"})
    assert bad.status_code == 400 and "step" in bad.json()["error"]
    assert httpx.get(f"{s.url}/api/runs/0/episodes/999").status_code == 404
    assert httpx.get(f"{s.url}/api/runs/5/episodes").status_code == 404


def test_one_episode_tells_prompt_sampled_and_tool_tokens_apart(serve, synthetic: Path):
    s = serve(synthetic)
    row = json.loads((synthetic / "episodes.jsonl").read_text().splitlines()[0])
    ep = httpx.get(f"{s.url}/api/runs/0/episodes/0").json()
    assert ep["episode_id"] == row["episode_id"]
    trace, tokens = row["traces"][0], ep["traces"][0]["tokens"]
    assert tokens["ids"] == trace["prompt_ids"] + trace["response_ids"]
    n = len(trace["prompt_ids"])
    assert tokens["kind"][:n] == ["p"] * n
    assert tokens["kind"][n:] == ["s" if m else "e" for m in trace["response_mask"]]
    assert [t["weight_version"] for t in ep["traces"][0]["turns"]] == [0, 0]
    assert ep["decoded"] is False and tokens["text"] is None  # no model in the config: ids
    group = httpx.get(f"{s.url}/api/runs/0/group",
                      params={"step": 0, "group": row["group_id"]}).json()
    assert [e["sample_index"] for e in group["episodes"]] == [0, 1, 2, 3]


def test_a_failure_shows_its_cause_and_traceback(serve, tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    rng = random.Random(0)
    rows = []
    while not any(r["status"] != "ok" for r in rows):
        rows.append(episode_row(0, len(rows), 0, rng))
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = serve(run)
    stats = httpx.get(f"{s.url}/api/runs/0/stats").json()
    cause = rows[-1]["error_type"]
    assert stats["causes"] == {cause: 1}
    ep = httpx.get(f"{s.url}/api/runs/0/episodes/{len(rows) - 1}").json()
    assert ep["error"]["type"] == cause and "Traceback" in ep["error"]["traceback"]


def test_a_rollouts_only_run_has_histograms_not_steps(serve, tmp_path: Path):
    run = tmp_path / "rollouts"
    run.mkdir()
    rng = random.Random(4)
    rows = [{k: v for k, v in episode_row(0, g, i, rng).items()
             if k not in ("step", "advantage", "trained")} for g in range(5) for i in range(4)]
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({"episodes": 20}))
    (run / "config.json").write_text(json.dumps({"trainer": {"name": "export"}}))
    s = serve(run)
    info = httpx.get(f"{s.url}/api/runs").json()["runs"][0]
    assert (info["kind"], info["status"], info["episodes"]) == ("rollouts", "finished", 20)
    stats = httpx.get(f"{s.url}/api/runs/0/stats").json()
    ok = [r for r in rows if r["status"] == "ok"]
    assert sum(stats["reward_histogram"]["counts"]) == len(ok)
    assert len(stats["groups"]) == 5 and stats["latency"]["p50"] is not None


def test_new_steps_and_episodes_are_seen_without_restarting(serve, synthetic: Path):
    s = serve(synthetic)
    before = httpx.get(f"{s.url}/api/poll").json()["runs"][0]
    rng = random.Random(9)
    with (synthetic / "episodes.jsonl").open("a") as f:
        for i in range(4):
            f.write(json.dumps(episode_row(3, 0, i, rng)) + "\n")
    with (synthetic / "metrics.jsonl").open("a") as f:
        f.write(json.dumps(metrics_row(3, 4, rng)) + "\n")
    after = httpx.get(f"{s.url}/api/poll").json()["runs"][0]
    assert (before["steps_done"], before["episodes"]) == (3, 48)
    assert (after["steps_done"], after["episodes"]) == (4, 52)
    assert httpx.get(f"{s.url}/api/runs/0/episodes", params={"step": 3}).json()["total"] == 4


def test_only_files_inside_the_run_directory_are_served(serve, synthetic: Path, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    (synthetic / "training.png").write_bytes(b"\x89PNG fake")
    (synthetic / "link.txt").symlink_to(secret)
    (synthetic / "linkdir").symlink_to(tmp_path)
    s = serve(synthetic)
    base = f"{s.url}/api/runs/0/files"
    ok = httpx.get(f"{base}/training.png")
    assert ok.status_code == 200 and ok.content == b"\x89PNG fake"
    for path in ("..%2Fsecret.txt", "%2E%2E/secret.txt", "link.txt", "linkdir/secret.txt",
                 "%2Fetc%2Fpasswd", "sub/..%2F..%2Fsecret.txt"):
        r = httpx.get(f"{base}/{path}")
        assert r.status_code in (400, 404), path
        assert b"outside" not in r.content and b"root:" not in r.content, path
    assert httpx.get(f"{base}/nothing.png").status_code == 404
    # a page on another host name cannot read the API through DNS rebinding
    assert httpx.get(f"{s.url}/api/runs", headers={"Host": "evil.example"}).status_code == 400
    page = httpx.get(f"{s.url}/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(f"{s.url}/static/plotly.min.js").status_code == 200
    assert httpx.get(f"{s.url}/static/..%2Fserver.py").status_code == 404


def test_the_command_is_added_by_the_plugin_and_listens_on_loopback(synthetic: Path):
    parser = build_parser()
    args = parser.parse_args(["view", str(synthetic)])
    assert (args.host, args.port, args.run_dirs) == ("127.0.0.1", 8765, [str(synthetic)])
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "rollhub"), "view", str(synthetic), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("rollhub view: http://127.0.0.1:"), line
        url = line.split()[2]
        deadline = time.monotonic() + 10
        while True:
            try:
                assert httpx.get(f"{url}api/runs").json()["runs"][0]["episodes"] == 48
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_missing_run_directory_is_a_usage_error(tmp_path: Path):
    out = subprocess.run([str(Path(sys.executable).parent / "rollhub"), "view",
                          str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "is not a directory" in out.stderr


def test_a_forked_branch_is_its_own_section(serve, tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    rng = random.Random(5)
    rows = []
    while not any(len(r["traces"]) > 1 for r in rows):
        rows.append(episode_row(0, len(rows), 0, rng))
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = serve(run)
    ep = httpx.get(f"{s.url}/api/runs/0/episodes/{len(rows) - 1}").json()
    main, fork = ep["traces"]
    assert (main["branch_id"], fork["branch_id"], fork["parent_branch_id"], fork["fork_turn"]) == (
        0, 1, 0, 1)
    assert [t["drift"] for t in fork["turns"]] == ["fork"]


def test_a_parquet_export_is_read_too(serve, tmp_path: Path):

    run = tmp_path / "rollouts"
    run.mkdir()
    rng = random.Random(6)
    rows = [episode_row(0, g, i, rng) for g in range(3) for i in range(2)]
    for r in rows:
        r.pop("step")
    pq.write_table(pa.Table.from_pylist(rows), run / "episodes.parquet")
    s = serve(run)
    body = httpx.get(f"{s.url}/api/runs/0/episodes").json()
    assert body["total"] == 6 and body["rows"][0]["step"] is None
    ep = httpx.get(f"{s.url}/api/runs/0/episodes/5").json()
    assert ep["episode_id"] == rows[5]["episode_id"]
    group = httpx.get(f"{s.url}/api/runs/0/group", params={"group": rows[0]["group_id"]}).json()
    assert len(group["episodes"]) == 2


def test_splits_filter_and_an_environments_check_and_commands_show(serve, synthetic: Path):
    """A sandbox environment's episode: its split is a filter, its check sits next to the
    reward, its shell commands are tool calls of their turns, the manifest is served."""
    rows = [json.loads(x) for x in (synthetic / "episodes.jsonl").read_text().splitlines()]
    for i, row in enumerate(rows):
        row["payload"] = json.dumps({"seed": i, "split": f"depth-{1 + i % 3}"})
        row["result"] = json.dumps({"check": {"exit_code": i % 2, "output": "FAIL: x"}})
    (synthetic / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (synthetic / "manifest.json").write_text(json.dumps({"seed": 3, "git": {"commit": "abc"}}))
    s = serve(synthetic)
    facets = httpx.get(f"{s.url}/api/runs/0/facets").json()
    assert facets["splits"] == {"depth-1": 16, "depth-2": 16, "depth-3": 16}
    body = httpx.get(f"{s.url}/api/runs/0/episodes", params={"split": "depth-2"}).json()
    assert body["total"] == 16 and {r["split"] for r in body["rows"]} == {"depth-2"}
    ep = httpx.get(f"{s.url}/api/runs/0/episodes/1").json()
    assert ep["result"]["check"] == {"exit_code": 1, "output": "FAIL: x"}
    info = httpx.get(f"{s.url}/api/runs").json()["runs"][0]
    assert info["manifest"]["git"]["commit"] == "abc"


def test_tool_calls_are_read_from_the_sampled_text() -> None:
    from rollhub_view.tokens import parse_tool_calls

    text = ('<tool_call>\n{"name": "shell", "arguments": {"command": "sh check.sh"}}\n'
            '</tool_call>\n<tool_call>{"name": "shell", "arguments": {"command": "echo 1'
            '</tool_call>')
    assert parse_tool_calls(text) == [
        {"name": "shell", "arguments": {"command": "sh check.sh"}},
        {"name": None, "raw": '{"name": "shell", "arguments": {"command": "echo 1'},
    ]
    assert parse_tool_calls("Answer: 42") == [] and parse_tool_calls(None) == []


def test_a_session_rollout_shows_its_phase_seconds(serve, tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    row = episode_row(0, 0, 0, random.Random(1))
    phases = {"setup_wait_s": 0.01, "setup_s": 1.5, "run_wait_s": 0.0, "run_s": 3.25,
              "shutdown_s": 0.4, "shutdown_error": "AccessDeniedException: no"}  # fmt: skip
    row["metrics"] = json.dumps({"session": phases})
    (run / "episodes.jsonl").write_text(json.dumps(row) + "\n")
    ep = httpx.get(f"{serve(run).url}/api/runs/0/episodes/0").json()
    assert ep["session"] == phases


def test_an_episode_is_read_as_the_core_exports_it(serve, tmp_path: Path):
    """The episode page parses rows with the core's ``episode_from_row``: what
    ``episode_to_row`` wrote comes back field for field (a trace's extra fields under its
    metadata); a row the core cannot read is refused naming it, not shown half-parsed."""
    from rollhub.episode import Episode, ErrorInfo
    from rollhub.export import episode_to_row
    from rollhub.trace import TraceRecord, TurnSpan

    trace = TraceRecord(
        session_id="s", prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1],
        response_logprobs=[-0.5, 0.0, -0.25], model_id="m", metadata={"k": 1},
        turns=[TurnSpan(turn_index=0, start=0, end=1, weight_version=2),
               TurnSpan(turn_index=1, start=2, end=3, finish_reason="length")],
        label="extra",
    )
    episode = Episode("e1", "g1", "s", 0, "error", payload={"q": "?"}, reward=0.0,
                      reward_components={"r": 0.0}, error=ErrorInfo("ToolError", "boom"),
                      traces=[trace], weight_version=2, submitted_at=1.0, finished_at=3.5,
                      metrics={"traceback": "Traceback ...", "node": "n1"})
    good = {**episode_to_row(episode, "x"), "step": 4, "advantage": -0.5, "trained": True}
    bad = {**good, "episode_id": "e2", "schema_version": 99}
    run = tmp_path / "run"
    run.mkdir()
    (run / "episodes.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    s = serve(run)

    ep = httpx.get(f"{s.url}/api/runs/0/episodes/0").json()
    assert (ep["episode_id"], ep["status"], ep["step"], ep["advantage"], ep["trained"]) == (
        "e1", "error", 4, -0.5, True)
    assert (ep["num_turns"], ep["num_sampled_tokens"], ep["elapsed_s"]) == (2, 2, 2.5)
    assert ep["payload"] == {"q": "?"} and ep["reward_components"] == {"r": 0.0}
    assert ep["error"] == {"type": "ToolError", "message": "boom", "traceback": "Traceback ..."}
    (shown,) = ep["traces"]
    assert shown["metadata"] == {"k": 1, "label": "extra"}
    assert [t["turn_index"] for t in shown["turns"]] == [0, 1]
    assert shown["turns"][1]["finish_reason"] == "length"
    assert shown["tokens"]["kind"] == ["p", "p", "s", "e", "s"]
    assert shown["tokens"]["version"] == [None, None, 2, None, None]

    refused = httpx.get(f"{s.url}/api/runs/0/episodes/1")
    assert refused.status_code == 400 and "schema_version 99" in refused.json()["error"]

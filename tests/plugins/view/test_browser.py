"""The page in headless Chromium, on a real run made by the main job's short form.

Overview, filtering the episode table, one episode's tokens (tool-result tokens shown as
not trained), the group view, a live update while the run is written, comparing runs, and
model text holding ``<script>`` rendered as text. Screenshots of the views go to
docs/view/ when ROLLHUB_VIEW_SCREENSHOTS=1 (else to the test's temporary directory).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest
from rollhub_view.synthetic import write_synthetic_run
from rollhub_view.tokens import decoder_for

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[3] / "docs" / "view"


def _wait(driver, script: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for: {script}"
        time.sleep(0.05)


def _open(driver, url: str, ready: str) -> None:
    driver.get(url)
    _wait(driver, f"return document.body.dataset.ready === '{ready}'")


def _charts_drawn(driver) -> int:
    return _wait(driver, """
        const charts = [...document.querySelectorAll('#charts [data-chart]')];
        return charts.length && charts.every(c => c.classList.contains('js-plotly-plot'))
            ? charts.length : 0;""")


def _shot(driver, name: str, tmp_path: Path) -> Path:
    folder = DOCS if os.environ.get("ROLLHUB_VIEW_SCREENSHOTS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    return path


def _tool_episode(run: Path) -> int:
    for n, line in enumerate((run / "episodes.jsonl").read_text().splitlines()):
        row = json.loads(line)
        if any(t["finish_reason"] == "tool_calls" and 0 in tr["response_mask"]
               for tr in row["traces"] for t in tr["turns"]):
            return n
    pytest.fail("no episode of the real run called the calculator")


def test_overview_of_a_real_run(serve, real_run: Path, browser, tmp_path: Path):
    s = serve(real_run)
    _open(browser, f"{s.url}/#overview", "overview")
    assert _charts_drawn(browser) >= 6
    chip = browser.execute_script("return document.querySelector('#runs .chip').textContent")
    assert "step 2/2" in chip and "16 episodes" in chip
    titles = browser.execute_script(
        "return [...document.querySelectorAll('#charts [data-chart]')].map(c => c.dataset.chart)")
    for title in ("Reward (mean)", "Task success", "Tool-call rate", "Loss", "Tokens per step",
                  "Seconds per step"):
        assert title in titles
    points = browser.execute_script(
        "return document.querySelector('[data-chart=\"Reward (mean)\"]').data[0].x")
    assert points == [1, 2]
    # a 2-step run's axis reads 1, 2: whole steps, each once
    ticks = browser.execute_script(
        "return [...document.querySelectorAll('[data-chart=\"Reward (mean)\"] .xtick text')]"
        ".map(t => t.textContent)")
    assert ticks == ["1", "2"], ticks
    # the run says what produced it
    card = browser.execute_script("return document.querySelector('#run-cards .card').textContent")
    assert "seed" in card and "code" in card and "manifest" in card
    _shot(browser, "overview", tmp_path)


def test_filter_the_episodes_and_open_one_with_its_masked_tool_result(
        serve, real_run: Path, browser, tmp_path: Path):
    s = serve(real_run)
    _open(browser, f"{s.url}/#episodes", "episodes")
    assert browser.find_element("id", "ep-count").text == "16 of 16 episodes"
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("css selector", "#filters select[name=step]")).select_by_value("1")
    _wait(browser, "return document.getElementById('ep-count').textContent.startsWith('8 of 16')")
    steps = browser.execute_script(
        "return [...document.querySelectorAll('#episodes-table tbody tr')]"
        ".map(tr => tr.children[1].textContent)")
    assert steps == ["2"] * 8
    browser.find_element("css selector", "#filters input[name=q]").send_keys("calc-train")
    _wait(browser, "return document.getElementById('ep-count').textContent.startsWith('8 of 16')")
    _shot(browser, "episodes", tmp_path)

    n = _tool_episode(real_run)
    browser.find_element("css selector", "#filters button[type=reset]").click()
    _wait(browser, "return document.getElementById('ep-count').textContent.startsWith('16 of')")
    browser.find_element("css selector", f"#episodes-table tbody tr[data-n='{n}']").click()
    _wait(browser, "return document.body.dataset.ready === 'episode'")
    assert browser.current_url.endswith(f"#episode/0/{n}")
    tokens = browser.execute_script("""
        const t = k => [...document.querySelectorAll('#view-episode .tokens .tok.' + k)];
        return {env: t('e').map(s => [s.textContent, s.dataset.trained, s.title]),
                sampled: t('s').map(s => [s.textContent, s.dataset.trained, s.title]),
                prompt: t('p').length};""")
    env_text = "".join(t[0] for t in tokens["env"])
    assert "<|im_start|>tool" in env_text  # the calculator's reply, as the trainer got it
    assert all(t[1] == "0" and "not trained" in t[2] for t in tokens["env"])
    assert all(t[1] == "1" and "logprob" in t[2] and "weights v" in t[2]
               for t in tokens["sampled"])
    assert "<tool_call>" in "".join(t[0] for t in tokens["sampled"])
    assert tokens["prompt"] > 50
    heads = browser.execute_script(
        "return [...document.querySelectorAll('#view-episode .turn-head')].map(h => h.textContent)")
    assert heads and all("weights v" in h and "drift" in h for h in heads)
    # the tool call reads as a call, its reply as the next turn's tool output
    calls = browser.execute_script(
        "return [...document.querySelectorAll('#view-episode .call')].map(c => c.textContent)")
    row = json.loads((real_run / "episodes.jsonl").read_text().splitlines()[n])
    tok = decoder_for(json.loads((real_run / "config.json").read_text())["token_source"]["model"])
    assert tok.ready()
    names = [
        json.loads(block).get("name", "")
        for rec in row["traces"]
        for block in re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", tok.text(
            [t for t, m in zip(rec["response_ids"], rec["response_mask"], strict=True) if m]),
            re.S)
        if block.startswith("{")
    ]
    assert calls and any(c.startswith(name) for c in calls for name in names if name), (calls,
                                                                                       names)
    roles = browser.execute_script(
        "return [...document.querySelectorAll('#view-episode .msg-role')].map(r => r.textContent)")
    assert "tool output (masked, not trained)" in roles
    browser.execute_script("document.querySelector('#view-episode .trace').scrollIntoView()")
    _shot(browser, "episode", tmp_path)
    browser.execute_script("window.scrollTo(0, 0)")

    browser.find_element("partial link text", "see the group side by side").click()
    _wait(browser, "return document.body.dataset.ready === 'group'")
    assert browser.execute_script("return document.querySelectorAll('.group > .section').length") == 4


def test_a_run_being_written_updates_live(serve, real_run: Path, browser, tmp_path: Path):
    run = shutil.copytree(real_run, tmp_path / "live")
    s = serve(run)
    _open(browser, f"{s.url}/#overview", "overview")
    _charts_drawn(browser)
    browser.execute_script("window.__sameDocument = true")
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    with (run / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({**json.loads(metrics[-1]), "step": 2, "reward_mean": 0.5}) + "\n")
    with (run / "episodes.jsonl").open("a") as f:
        for r in rows[-8:]:
            f.write(json.dumps({**r, "step": 2, "episode_id": r["episode_id"] + "-again"}) + "\n")
    _wait(browser, "return document.querySelector('#runs .chip').textContent.includes('24 episodes')",
          timeout=15)
    _wait(browser, "const d = document.querySelector('[data-chart=\"Reward (mean)\"]').data;"
                   "return d && d[0].x.length === 3", timeout=15)
    assert browser.execute_script("return window.__sameDocument") is True  # no reload
    browser.execute_script("location.hash = '#episodes'")
    _wait(browser, "return document.getElementById('ep-count').textContent.startsWith('24 of 24')")


def test_runs_are_compared_on_the_same_curves(serve, real_run: Path, browser, tmp_path: Path):
    other = write_synthetic_run(tmp_path / "other", steps=4, groups=2, group_size=4)
    s = serve(real_run, other)
    _open(browser, f"{s.url}/#overview", "overview")
    _charts_drawn(browser)
    names = browser.execute_script(
        "return document.querySelector('[data-chart=\"Reward (mean)\"]').data.map(t => t.name)")
    assert names == [real_run.name, "other"]


def test_model_text_with_script_renders_as_text(serve, real_run: Path, browser, tmp_path: Path):
    run = shutil.copytree(real_run, tmp_path / "xss")
    dec = decoder_for(json.loads((run / "config.json").read_text())["token_source"]["model"])
    assert dec.ready(), dec.error
    evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    row = json.loads((run / "episodes.jsonl").read_text().splitlines()[_tool_episode(run)])
    trace = row["traces"][0]
    first = trace["turns"][0]
    ids = dec.tokenizer.encode(evil, add_special_tokens=False)
    cut = first["end"]
    trace["response_ids"] = ids + trace["response_ids"][cut:]
    trace["response_mask"] = [1] * len(ids) + trace["response_mask"][cut:]
    trace["response_logprobs"] = [-0.5] * len(ids) + trace["response_logprobs"][cut:]
    shift = len(ids) - cut
    trace["turns"] = [dict(first, end=len(ids))] + [
        dict(t, start=t["start"] + shift, end=t["end"] + shift) for t in trace["turns"][1:]]
    row.update(episode_id="evil", payload=json.dumps({"question": evil}),
               result=json.dumps({"final_message": evil}), error_type="ToolError",
               error_message=evil)
    with (run / "episodes.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    s = serve(run)
    n = httpx.get(f"{s.url}/api/runs").json()["runs"][0]["episodes"] - 1
    _open(browser, f"{s.url}/#episode/0/{n}", "episode")
    browser.find_element("css selector", "#view-episode details summary").click()
    time.sleep(0.3)
    assert browser.execute_script("return window.__pwned") is None
    assert browser.execute_script("return document.querySelectorAll('#view-episode script, "
                                  "#view-episode img').length") == 0
    text = browser.execute_script("return document.getElementById('view-episode').innerText")
    assert "<script>window.__pwned = 1</script>" in text  # the sampled reply, as text
    assert text.count("onerror") >= 2  # the error message and the task, as text
    _open(browser, f"{s.url}/#episodes", "episodes")
    assert browser.execute_script("return window.__pwned") is None


def test_a_rollouts_only_run_has_reward_group_and_latency_charts(serve, browser, tmp_path: Path):
    import random

    from rollhub_view.synthetic import episode_row

    run = tmp_path / "rollouts"
    run.mkdir()
    rng = random.Random(8)
    rows = [{k: v for k, v in episode_row(0, g, i, rng).items() if k != "step"}
            for g in range(6) for i in range(4)]
    (run / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps({"episodes": len(rows), "episodes_per_s": 2.5}))
    s = serve(run)
    _open(browser, f"{s.url}/#overview", "overview")
    drawn = _wait(browser, """
        const charts = [...document.querySelectorAll('#stats [data-chart]')];
        return charts.every(c => c.classList.contains('js-plotly-plot'))
            && charts.map(c => c.dataset.chart);""")
    assert drawn == ["causes", "rewards", "groups", "latency"]
    counts = browser.execute_script(
        "return document.querySelector('[data-chart=\"rewards\"]').data[0].y")
    assert sum(counts) == sum(r["status"] == "ok" for r in rows)
    assert browser.execute_script("return document.querySelectorAll('#charts [data-chart]').length") == 0


def test_a_session_rollouts_phases_show_on_its_page(serve, browser, tmp_path: Path):
    import random

    from rollhub_view.synthetic import episode_row

    run = tmp_path / "sessions"
    run.mkdir()
    row = {k: v for k, v in episode_row(0, 0, 0, random.Random(3)).items() if k != "step"}
    row["metrics"] = json.dumps({"session": {"setup_wait_s": 0.0, "setup_s": 1.5, "run_wait_s": 0.25,
                                             "run_s": 3.25, "shutdown_s": 0.5}})  # fmt: skip
    (run / "episodes.jsonl").write_text(json.dumps(row) + "\n")
    s = serve(run)
    _open(browser, f"{s.url}/#episode/0/0", "episode")
    text = browser.execute_script("return document.getElementById('view-episode').innerText")
    assert "setup 1.50 s · queued for run 0.25 s · run 3.25 s · teardown 0.50 s" in text


def test_a_run_of_several_policies_has_a_line_per_policy(serve, synthetic: Path, browser):
    rows = [json.loads(x) for x in (synthetic / "metrics.jsonl").read_text().splitlines()]
    for step, row in enumerate(rows):
        row.update({"policy/proposer/success_rate": [0.25, 0.5, 0.75][step],
                    "policy/checker/success_rate": [0.5, 0.625, 0.75][step],
                    "policy/proposer/loss": 0.1, "policy/checker/loss": 0.2})
    (synthetic / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    held_out = {"pass_at_1": 0.5, "pass_at_1_ci": [0.3, 0.7], "policies": {
        "proposer": {"pass_at_1": 0.25, "pass_at_1_ci": [0.1, 0.5]},
        "checker": {"pass_at_1": 0.75, "pass_at_1_ci": [0.5, 0.9]}}}
    (synthetic / "eval.json").write_text(json.dumps({"before": held_out, "after": held_out}))
    s = serve(synthetic)
    _open(browser, f"{s.url}/#overview", "overview")
    _charts_drawn(browser)
    lines = browser.execute_script(
        "const d = document.querySelector('[data-chart=\"Task success by policy\"]').data;"
        "return d.map(t => [t.name, t.y])")
    assert lines == [["checker", [0.5, 0.625, 0.75]], ["proposer", [0.25, 0.5, 0.75]]]
    card = browser.execute_script("return document.querySelector('#run-cards .card').textContent")
    assert "held-out, policy proposer" in card and "0.25 [0.10, 0.50]" in card

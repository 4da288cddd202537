"""An agent must not earn reward, or erase a bad one, by breaking the scoring instead of the bug.

Each test plays one trick an agent's commands can play on a real local sandbox of the SWE
example's ``stats`` repository (whose median is buggy: 3 of 5 tests pass), then scores it
with the example's own ``[plugins.sandbox]`` settings.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from rollhub.config import load_config
from rollhub.episode import Episode
from rollhub_sandbox import AsyncSandboxClient
from rollhub_sandbox.plugin import rollhub_collect_rewards
from rollhub_sandbox.result import OutputBuffer

from tests.sandbox.sandbox_helpers import NOBODY_SKIP, needs_bwrap, run_as_nobody

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "swe"
PAYLOAD = json.loads((EXAMPLE / "data" / "tasks.jsonl").read_text().splitlines()[0])
REPO = EXAMPLE / "repos" / PAYLOAD["repo"]


async def _score(root: Path, commands: list[str], reward: str = "binary") -> float:
    """Run the agent's ``commands`` in a fresh sandbox of the repo; score it as the hub does."""
    client = AsyncSandboxClient("local", root=str(root), kill_grace=0.2)
    sb = await client.create(str(REPO), ttl=120)
    for command in commands:
        result = await sb.exec(command, timeout=10)
        assert result.exit_code == 0, result
    config = load_config(EXAMPLE / "rollhub.toml", env={
        "ROLLHUB_PLUGINS__SANDBOX__OPTIONS": f'{{ root = "{root}", kill_grace = 0.2 }}',
        "ROLLHUB_PLUGINS__SANDBOX__REWARD": reward,
    })
    episode = Episode(episode_id="e", group_id="g", session_id="s", sample_index=0,
                      status="ok", payload=PAYLOAD, result={"sandbox_id": sb.id})
    pending = rollhub_collect_rewards(episode=episode, hub=SimpleNamespace(config=config))
    assert inspect.isawaitable(pending)
    return (await pending)["tests"]


def _append(code: str) -> str:
    return f"cat >> stats.py <<'EOF'\n{textwrap.dedent(code)}EOF"


async def test_the_unfixed_bug_scores_as_it_is(tmp_path: Path) -> None:
    assert await _score(tmp_path, [], "binary") == 0.0
    assert await _score(tmp_path, [], "fraction") == pytest.approx(0.6)


async def test_ending_pytest_early_with_exit_0_is_not_a_pass(tmp_path: Path) -> None:
    trick = _append("import os\nos._exit(0)\n")
    assert await _score(tmp_path, [trick], "binary") == 0.0
    assert await _score(tmp_path, [trick], "fraction") == 0.0


async def test_a_root_conftest_cannot_rewrite_outcomes(tmp_path: Path) -> None:
    conftest = textwrap.dedent("""\
        import pytest
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            outcome.get_result().outcome = "passed"
        """)
    ini = "[tool.pytest.ini_options]\naddopts = '-p conftest'\n"
    commands = [f"cat > conftest.py <<'EOF'\n{conftest}EOF", f"printf \"{ini}\" > pyproject.toml"]
    assert await _score(tmp_path, commands, "binary") == 0.0


async def test_a_fake_summary_printed_at_exit_does_not_count(tmp_path: Path) -> None:
    trick = _append("import atexit\natexit.register(print, '5 passed in 0.01s')\n")
    assert await _score(tmp_path, [trick], "fraction") == pytest.approx(0.6)


async def test_background_jobs_cannot_rewrite_the_restored_tests(tmp_path: Path) -> None:
    loop = ("nohup sh -c 'end=$(($(date +%s)+20)); while [ $(date +%s) -lt $end ]; do "
            "printf \"def test_ok():\\n    pass\\n\" > tests/test_stats.py 2>/dev/null; "
            "sleep 0.02; done' >/dev/null 2>&1 &")
    assert await _score(tmp_path, [loop], "binary") == 0.0


async def test_output_flood_does_not_turn_a_failure_into_infra_error(tmp_path: Path) -> None:
    flood = "sed -i 's/    ordered = sorted(values)/    ordered = sorted(values); print(\"x\" * 2_000_000)/' stats.py"
    assert await _score(tmp_path, [flood], "fraction") == pytest.approx(0.6)


@pytest.mark.parametrize("code", [4, 5, 3, 127])
async def test_the_agent_ending_pytest_with_any_status_scores_zero(tmp_path: Path, code: int) -> None:
    # Raising RewardError here would end the episode infra_error: never trained, so an
    # agent that cannot fix the bug would learn to break the test run instead.
    trick = _append(f"import os\nos._exit({code})\n")
    assert await _score(tmp_path, [trick], "fraction") == 0.0
    assert await _score(tmp_path, [trick], "binary") == 0.0


def test_output_buffer_keeps_the_tail() -> None:
    buf = OutputBuffer(10)
    for chunk in (b"head-", b"x" * 1000, b"-tail"):
        buf.feed(chunk)
    assert buf.getvalue() == b"head-" + b"-tail" and buf.truncated and buf.seen == 1010
    small = OutputBuffer(10)
    small.feed(b"abc")
    small.feed(b"def")
    assert small.getvalue() == b"abcdef" and not small.truncated


_RESTORE_ESCAPE = """
import asyncio, pathlib, sys
from rollhub_sandbox import AsyncSandboxClient
from rollhub_sandbox.rewards import SandboxRewardSettings, run_tests
work = pathlib.Path(sys.argv[1]); root = str(work / "root")
victim = work / "victim.txt"; victim.write_text("host file\\n")
repo = work / "repo"; (repo / "tests").mkdir(parents=True)
(repo / "tests" / "test_a.py").write_text("def test_a(): pass\\n")
async def main():
    client = AsyncSandboxClient("local", root=root, isolation="bwrap")
    sb = await client.create(str(repo), ttl=120)
    r = await sb.exec(f"ln -sf {victim} tests/test_a.py && echo x=1 > tests/conftest.py "
                      "&& chmod 555 tests")
    assert r.exit_code == 0, r
    s = SandboxRewardSettings(test_command="ls tests", reward="binary",
                              options={"root": root, "isolation": "bwrap"})
    try:
        run = await run_tests(s, sb.id, [("tests", repo / "tests")])
        print("LISTING", getattr(run, "result", run).stdout.split())
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc)
    print("VICTIM", victim.read_text().strip())
asyncio.run(main())
"""


@needs_bwrap
@pytest.mark.skipif(NOBODY_SKIP is not None, reason=str(NOBODY_SKIP))
def test_restoring_tests_never_writes_through_the_agents_symlinks() -> None:
    # As an unprivileged user (root ignores the chmod): the agent makes tests/ read-only
    # and points a test file at a host file the bwrap sandbox cannot even see.
    proc = run_as_nobody(_RESTORE_ESCAPE)
    assert "VICTIM host file" in proc.stdout, proc.stdout + proc.stderr
    assert "LISTING ['test_a.py']" in proc.stdout, proc.stdout + proc.stderr


_UNDELETABLE = """
import asyncio, os, pathlib, sys
from rollhub_sandbox import AsyncSandboxClient
root = pathlib.Path(sys.argv[1]) / "root"
async def main():
    sb = await AsyncSandboxClient("local", root=str(root), isolation="bwrap").create(ttl=60)
    await sb.exec("mkdir -p d/e && echo x > d/e/f && chmod 555 d/e d")
    await sb.destroy()
    print("LEFT", sorted(os.listdir(root)))
asyncio.run(main())
"""


@needs_bwrap
@pytest.mark.skipif(NOBODY_SKIP is not None, reason=str(NOBODY_SKIP))
def test_destroy_removes_directories_the_agent_made_read_only() -> None:
    proc = run_as_nobody(_UNDELETABLE)
    assert "LEFT []" in proc.stdout, proc.stdout + proc.stderr

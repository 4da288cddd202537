"""Installed plugin distributions are discovered, selected by config, and isolated on failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROLLHUB = [sys.executable, "-m", "rollhub.cli"]

GOOD_PLUGIN = """
from rollhub import hookimpl
from rollhub.training import Trainer


class CountingTrainer(Trainer):
    name = "counting"

    async def consume(self, group):
        return {"n": len(group.episodes)}


@hookimpl
def rollhub_register_components(registry):
    registry.add_trainer(CountingTrainer)
"""

BROKEN_PLUGIN = """
raise ImportError("this plugin needs a package that is not installed")
"""


def run_cli(args: list[str], env: dict[str, str], cwd: Path | None = None):
    return subprocess.run(
        [*ROLLHUB, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_installed_plugin_is_listed_and_selectable(install_plugin, tmp_path):
    env = install_plugin("rollhub-counting", "rollhub_counting", GOOD_PLUGIN, "counting")

    out = run_cli(["plugins", "--json"], env)
    assert out.returncode == 0, out.stderr
    rows = {r["plugin"]: r for r in json.loads(out.stdout)}
    assert rows["counting"]["distribution"] == "rollhub-counting"
    assert rows["counting"]["version"] == "1.2.3"
    assert rows["counting"]["components"] == ["trainer:counting"]

    cfg = tmp_path / "rollhub.toml"
    (tmp_path / "agent.py").write_text("app = None\n")
    (tmp_path / "data.jsonl").write_text('{"id": "a"}\n')
    cfg.write_text('[experiment]\ndataset = "data.jsonl"\n[runtime]\napp = "agent.py:app"\n'
                   '[trainer]\nname = "counting"\n')  # fmt: skip
    ok = run_cli(["config", "check", str(cfg)], env)
    assert ok.returncode == 0, ok.stderr
    assert "trainer=counting" in ok.stdout

    # Without the plugin on the path the same config names the problem.
    missing = run_cli(
        ["config", "check", str(cfg)], {k: v for k, v in env.items() if k != "PYTHONPATH"}
    )
    assert missing.returncode == 2
    assert "no trainer named 'counting' (trainer.name)" in missing.stderr


def test_broken_plugin_is_reported_and_others_still_load(install_plugin):
    install_plugin("rollhub-counting", "rollhub_counting", GOOD_PLUGIN, "counting")
    env = install_plugin("rollhub-broken", "rollhub_broken", BROKEN_PLUGIN, "broken")

    out = run_cli(["plugins"], env)
    assert out.returncode == 1  # a load failure is a runtime failure of the listing
    assert "Load failures:" in out.stdout
    assert "plugin 'broken' (rollhub_broken, from rollhub-broken) failed to load" in out.stdout
    assert "ImportError: this plugin needs a package that is not installed" in out.stdout
    # the good plugin and the built-ins still work
    assert "trainer           counting" in out.stdout
    assert "token_source      none" in out.stdout


def test_disable_switch_skips_a_plugin(install_plugin):
    env = install_plugin("rollhub-broken", "rollhub_broken", BROKEN_PLUGIN, "broken")
    env["ROLLHUB_DISABLE_PLUGINS"] = "broken"
    out = run_cli(["plugins", "--json"], env)
    assert out.returncode == 0, out.stdout
    assert "broken" not in {r["plugin"] for r in json.loads(out.stdout)}


RAISING_REGISTRATION = """
from rollhub import hookimpl

@hookimpl
def rollhub_register_components(registry):
    raise RuntimeError("registration exploded")
"""

DUPLICATE_NAME = """
from rollhub import hookimpl
from rollhub.training import Trainer

class Export(Trainer):
    name = "export"

    async def consume(self, group):
        return None

@hookimpl
def rollhub_register_components(registry):
    registry.add_trainer(Export)
"""

BAD_SIGNATURE = """
from rollhub import hookimpl

@hookimpl
def rollhub_register_components(registry, not_an_argument):
    pass
"""


def test_plugins_failing_while_registering_are_contained(install_plugin):
    install_plugin("rollhub-counting", "rollhub_counting", GOOD_PLUGIN, "counting")
    install_plugin("rollhub-raises", "rollhub_raises", RAISING_REGISTRATION, "raises")
    install_plugin("rollhub-dup", "rollhub_dup", DUPLICATE_NAME, "dup")
    env = install_plugin("rollhub-badsig", "rollhub_badsig", BAD_SIGNATURE, "badsig")

    out = run_cli(["plugins", "--json"], env)
    assert out.returncode == 1
    rows = {r["plugin"]: r for r in json.loads(out.stdout)}
    assert "failed to register: RuntimeError: registration exploded" in rows["raises"]["error"]
    assert "two trainer components are named 'export'" in rows["dup"]["error"]
    assert "is invalid" in rows["badsig"]["error"]
    # the others, and the built-in export trainer, are intact
    assert rows["counting"]["error"] is None and rows["counting"]["components"] == [
        "trainer:counting"
    ]
    listing = run_cli(["plugins"], env).stdout
    assert "trainer           export         rollhub.builtin.components" in listing

"""Fixtures of the rollhub-view tests: a real run (the main job's short form, made once per
session), synthetic runs, the server on 127.0.0.1 in a thread, and headless Chromium."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from rollhub_view.run_dir import RunDir
from rollhub_view.server import LOOPBACK_HOSTS, ViewState, make_app
from rollhub_view.synthetic import write_synthetic_run
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "math" / "train.toml"
ROLLHUB = Path(sys.executable).parent / "rollhub"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

#: the README's main job, short: 2 steps of 2 groups of 4, no held-out evaluation
SHORT = {
    "ROLLHUB_TRAINING__STEPS": "2",
    "ROLLHUB_TRAINING__BATCH_GROUPS": "2",
    "ROLLHUB_TRAINING__CHECKPOINT_EVERY": "0",
    "ROLLHUB_EXPERIMENT__N_SAMPLES": "4",
    "ROLLHUB_EVAL__BEFORE_TRAINING": "false",
    "ROLLHUB_EVAL__AFTER_TRAINING": "false",
}


class Served:
    """A view server running in a thread of this process."""

    def __init__(self, runs: list[Path]) -> None:
        self.state = ViewState([RunDir(p) for p in runs])
        self.state.refresh()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        app = make_app(self.state, allowed_hosts=LOOPBACK_HOSTS)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "the view server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def serve() -> Iterator[object]:
    """``serve(run_dir, ...)`` starts a server on 127.0.0.1; stopped after the test."""
    started: list[Served] = []

    def start(*runs: Path) -> Served:
        s = Served(list(runs))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def synthetic(tmp_path: Path) -> Path:
    """A small finished synthetic training run (no tokenizer: ids are shown)."""
    return write_synthetic_run(tmp_path / "syn", steps=3, groups=4, group_size=4, seed=7)


@pytest.fixture(scope="session")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main job's short form, run once per session: real workers, gateway, SmolLM2."""
    tmp = tmp_path_factory.mktemp("viewrun")
    env = {**os.environ, **SHORT, "ROLLHUB_STORE__URL": f'"file://{tmp / "store"}"'}
    out = subprocess.run(
        [str(ROLLHUB), "run", str(CONFIG), "--run-dir", str(tmp / "run"), "--no-progress"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return tmp / "run"


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Headless Chromium driven by Selenium (a test requirement); skips, saying how to install
    it, where the Chromium engine is missing."""

    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("Chromium is missing: apt-get install -y chromium chromium-driver "
                    "(.ci/run installs it when it runs as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()

"""A result store that stops answering is reported while ``rollhub run`` waits for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tests.core.foundation.project import make_project

# Every operation waits while <root>/.stall exists: a store that stopped answering.
HANG_PLUGIN = """
import time
from pathlib import Path

from rollhub import hookimpl
from rollhub.stores.file import FileResultStore


class HangingStore(FileResultStore):
    name = "hang"

    @classmethod
    def from_url(cls, url, **options):
        return cls(url[len("hang://"):], **options)

    @property
    def url(self):
        return "hang://" + self.root.as_posix()

    def _wait(self):
        while (Path(self.root) / ".stall").exists():
            time.sleep(0.05)

    def put(self, key, document):
        self._wait()
        return super().put(key, document)

    def get(self, key):
        self._wait()
        return super().get(key)

    def exists(self, key):
        self._wait()
        return super().exists(key)


@hookimpl
def rollhub_register_components(registry):
    registry.add_store(HangingStore)
"""


def test_a_stalled_store_is_reported_and_the_run_carries_on_when_it_answers(tmp_path):
    (tmp_path / "hang_plugin.py").write_text(HANG_PLUGIN)
    cfg = make_project(
        tmp_path,
        rows=[{"id": "a"}],
        experiment="store_stall_warn_s = 0.5",
        extra='[trainer]\nname = "export"\nformats = ["jsonl"]\n\n'
        '[plugins]\nmodules = ["hang_plugin"]',
    )
    cfg.write_text(cfg.read_text().replace('url = "file://store"', 'url = "hang://store"'))
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / ".stall").write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollhub.cli", "run", str(cfg), "--run-dir", "run"],
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(6)  # workers start, the rollouts block on the store, the watch notices
        (tmp_path / "store" / ".stall").unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "no result-store operation has completed for" in err, err
    assert "2 rollouts are in flight (store hang://" in err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["ok"] == 2

"""File paths the view cannot open (too long, a symlink loop) are a 4xx, never a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from rollhub.errors import UsageError
from rollhub_view.errors import NotFound
from rollhub_view.run_dir import safe_path

BAD = ["a" * 300, "x/" + "b" * 300, "loop", "loop/x", "ring1", "ring1/y"]


def _plant(run: Path) -> None:
    (run / "loop").symlink_to("loop")
    (run / "ring1").symlink_to("ring2")
    (run / "ring2").symlink_to("ring1")


def test_unopenable_paths_are_refused_not_raised(synthetic: Path) -> None:
    _plant(synthetic)
    for relative in BAD:
        with pytest.raises((NotFound, UsageError)):
            safe_path(synthetic, relative)


def test_the_server_answers_4xx_for_unopenable_paths(serve, synthetic: Path) -> None:
    _plant(synthetic)
    (synthetic / "training.png").write_bytes(b"\x89PNG fake")
    s = serve(synthetic)
    base = f"{s.url}/api/runs/0/files"
    for relative in BAD:
        r = httpx.get(f"{base}/{relative}")
        assert r.status_code in (400, 404), (relative, r.status_code, r.text)
        assert "error" in r.json()
    assert httpx.get(f"{base}/training.png").status_code == 200

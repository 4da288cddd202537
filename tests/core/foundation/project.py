"""A throw-away rollhub project on disk: a no-LLM agent, a dataset and a config."""

from __future__ import annotations

import json
from pathlib import Path

AGENT = """
from rollhub.app import RolloutApp

app = RolloutApp()


@app.rollout_entrypoint
def handle(payload):
    if payload.get("fail"):
        raise ValueError(f"cannot solve {payload['id']}")
    return {"rewards": float(payload.get("reward", 1.0))}
"""


def make_project(
    root: Path, *, rows: list[dict] | None = None, extra: str = "", experiment: str = ""
) -> Path:
    """Write ``agent.py``, ``data.jsonl`` and ``rollhub.toml`` under ``root``; return the config.

    :param extra: more TOML appended to the file (sections after the defaults).
    :param experiment: more ``[experiment]`` lines.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "agent.py").write_text(AGENT)
    rows = rows if rows is not None else [{"id": "a"}, {"id": "b"}]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = root / "rollhub.toml"
    cfg.write_text(
        f"""
[experiment]
name = "t"
dataset = "data.jsonl"
n_samples = 2
timeout_s = 60
progress = false
output_dir = "runs"
{experiment}

[runtime]
name = "local"
app = "agent.py:app"
workers = 1

[store]
url = "file://store"
{extra}
"""
    )
    return cfg

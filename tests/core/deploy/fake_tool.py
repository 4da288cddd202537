"""The fake container CLI of the deploy tests (``fake_container_tool.py``, installed as
``docker`` by the ``fake_tool`` fixture) and the record of what it was asked."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKE_TOOL = Path(__file__).with_name("fake_container_tool.py")


@dataclass
class FakeTool:
    """The fake container CLI installed as ``docker`` on a PATH without the real one."""

    path: Path
    log: Path

    def records(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

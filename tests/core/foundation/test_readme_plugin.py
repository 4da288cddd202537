"""The README's "Write your own plugin" example runs as written, on the current API."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from types import ModuleType

from rollhub.registry import ComponentRegistry
from rollhub.training import TrainerRole, role_of

README = Path(__file__).parents[3] / "README.md"


def test_the_readme_plugin_registers_a_consumer_without_deprecation_warnings() -> None:
    section = README.read_text(encoding="utf-8").split("## Write your own plugin", 1)[1]
    source = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = ModuleType("my_plugin")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec(compile(source, "README.md", "exec"), module.__dict__)
        assert role_of(module.PrintTrainer) is TrainerRole.CONSUMER
    registry = ComponentRegistry()
    module.rollhub_register_components(registry)
    assert registry.get("trainer", "print") is module.PrintTrainer

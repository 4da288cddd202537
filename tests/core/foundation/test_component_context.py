"""Components get what the core knows in one typed object; older constructors keep working."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel
from rollhub import hookimpl
from rollhub.errors import ConfigError
from rollhub.plugins import build_host
from rollhub.registry import ComponentContext
from rollhub.runtime import Runtime, RuntimeOptions
from rollhub.training import Trainer


class EchoOptions(RuntimeOptions):
    greeting: str = "hi"


class EchoRuntime(Runtime):
    name: ClassVar[str] = "echo"
    Options: ClassVar[type[RuntimeOptions]] = EchoOptions

    async def submit(self, request: Any) -> Any:
        raise NotImplementedError

    async def cancel(self, session_id: str) -> None:
        return None


class ContextTrainer(Trainer):
    name = "ctx"


class OldStyleTrainer(Trainer):
    """A trainer written against the older keywords."""

    name = "oldstyle"

    def __init__(
        self,
        options: BaseModel | None = None,
        *,
        run_dir: Path | None = None,
        exp_id: str = "?",
        **kw: Any,
    ) -> None:
        super().__init__(options, run_dir=run_dir, **kw)
        self.seen = (run_dir, exp_id)


class Components:
    @hookimpl
    def rollhub_register_components(self, registry):
        registry.add_runtime(EchoRuntime)
        registry.add_trainer(ContextTrainer)
        registry.add_trainer(OldStyleTrainer)


def test_runtime_keeps_base_dir_given_with_options(tmp_path):
    runtime = EchoRuntime(EchoOptions(greeting="yo"), base_dir=tmp_path)
    assert runtime.options.greeting == "yo"
    assert runtime.context.base_dir == tmp_path
    assert runtime.context.path("agent.py") == tmp_path / "agent.py"


def test_runtime_refuses_fields_next_to_options():
    with pytest.raises(ConfigError, match=r"got options and keyword fields \(greeting\)"):
        EchoRuntime(EchoOptions(), greeting="yo")


def test_registry_builds_with_a_context_or_the_older_keywords(tmp_path):
    host = build_host(entry_points=False, plugins=[Components()])
    ctx = ComponentContext(base_dir=tmp_path, run_dir=tmp_path / "run", exp_id="exp7")
    reg = host.registry

    runtime = reg.build("runtime", "echo", {"greeting": "yo"}, section="runtime", context=ctx)
    assert runtime.context is ctx and runtime.options.greeting == "yo"

    trainer = reg.build("trainer", "ctx", {}, section="trainer", context=ctx)
    assert trainer.context is ctx
    assert (trainer.run_dir, trainer.exp_id) == (tmp_path / "run", "exp7")

    old = reg.build("trainer", "oldstyle", {}, section="trainer", context=ctx)
    assert old.seen == (tmp_path / "run", "exp7")

    local = reg.build("runtime", "local", {"app": "agent.py:app"}, section="runtime", context=ctx)
    assert local.app_ref.startswith(str(tmp_path / "agent.py"))

    export = reg.build("trainer", "export", {}, section="trainer", context=ctx)
    assert (export.run_dir, export.exp_id) == (tmp_path / "run", "exp7")

    with pytest.raises(ConfigError, match=r"runtime\.greeting"):
        reg.build("runtime", "echo", {"greeting": 3}, section="runtime", context=ctx)


def test_the_hub_hands_components_one_context(tmp_path):
    import asyncio

    from rollhub.testing import make_hub

    config = {
        "experiment": {"exp_id": "exp9"},
        "runtime": {"name": "echo", "greeting": "yo"},
        "trainer": {"name": "ctx"},
    }
    hub = make_hub(config, Components(), run_dir=tmp_path / "run")

    async def main():
        async with hub:
            return hub.runtime.context, hub.trainer.context

    runtime_ctx, trainer_ctx = asyncio.run(main())
    assert runtime_ctx == trainer_ctx
    assert (runtime_ctx.run_dir, runtime_ctx.exp_id) == (tmp_path / "run", "exp9")
    assert runtime_ctx.config is hub.config

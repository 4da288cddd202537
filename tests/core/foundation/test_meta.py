"""Meta-tests: hooks documented, exports sorted and resolvable, errors picklable."""

from __future__ import annotations

import importlib
import inspect
import pickle
import re
from pathlib import Path

import rollhub
from rollhub import errors, hookspecs

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plugin_hooks.md"


def _specs():
    return {n: f for n, f in vars(hookspecs).items() if n.startswith("rollhub_") and callable(f)}


def test_every_hook_is_documented_under_its_exact_signature():
    text = DOCS.read_text()
    headings = set(re.findall(r"^### `(rollhub_\w+\([^)]*\))`", text, re.M))
    for name, fn in _specs().items():
        params = ", ".join(inspect.signature(fn).parameters)
        assert f"{name}({params})" in headings, (
            f"docs/plugin_hooks.md lacks '### `{name}({params})`'"
        )
    documented = {h.split("(")[0] for h in headings}
    assert documented == set(_specs()), "docs/plugin_hooks.md documents a hook that does not exist"


def test_every_hookspec_has_a_docstring_with_mode_and_default():
    for name, fn in _specs().items():
        doc = inspect.getdoc(fn) or ""
        assert "Default" in doc and "Awaitable" in doc, name
        assert ":param" in doc, name


def test_public_exports_are_sorted_and_resolve():
    assert rollhub.__all__ == sorted(rollhub.__all__)
    for name in rollhub.__all__:
        assert getattr(rollhub, name) is not None, name


def test_errors_are_picklable_with_context_and_public_module():
    for name in errors.__all__:
        cls = getattr(errors, name)
        err = cls("boom", session_id="s-1")
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is cls and str(again) == "boom" and again.session_id == "s-1"
        assert cls.__module__ == "rollhub"


def test_error_tree_matches_the_documented_bases():
    assert issubclass(errors.ConfigError, ValueError)
    assert issubclass(errors.RolloutTimeout, TimeoutError)
    assert issubclass(errors.UsageError, RuntimeError)
    assert issubclass(errors.UnknownComponentError, LookupError)
    assert errors.SubmissionError("x", transient=True).transient is True


def test_import_rollhub_is_light():
    # Run in a fresh interpreter: nothing heavy may be imported by `import rollhub`.
    import subprocess
    import sys

    code = (
        "import sys, rollhub; "
        "heavy = [m for m in ('torch', 'transformers', 'aiohttp', 'boto3', 'pydantic', 'ray', "
        "'stevedore', 'starlette') if m in sys.modules]; print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_plugins_modules_import_without_heavy_dependencies():
    import subprocess
    import sys

    code = (
        "import sys; from rollhub.plugins import build_host; build_host(); "
        "print(','.join(m for m in ('torch', 'transformers', 'boto3', 'ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", "registration imported a heavy package"


def test_hookimpl_marker_is_the_projects():
    mod = importlib.import_module("rollhub.plugin_host.markers")
    assert rollhub.hookimpl is mod.hookimpl

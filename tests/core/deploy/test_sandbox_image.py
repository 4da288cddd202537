"""A task image wrapped with the sandbox health shim."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollhub.deploy.sandbox_image import (
    SHIM_PATH,
    find_shim_source,
    render_sandbox_dockerfile,
    write_sandbox_context,
)
from rollhub.errors import ConfigError, UsageError

from tests.core.deploy.dockerfile_lint import check_agentcore_image, parse, serve_command, stages

REPO_SHIM = Path(__file__).parents[3] / "sandbox" / "shim" / "shim.c"


def test_wrapped_image_serves_the_shim_on_8080() -> None:
    text = render_sandbox_dockerfile("python:3.11-slim")
    # the task image keeps its own user, so only the non-root rule is relaxed
    assert check_agentcore_image(text, require_non_root=False) == []
    assert serve_command(text) == [SHIM_PATH, "--host", "0.0.0.0", "--port", "8080"]
    build, final = stages(parse(text))
    assert build[0].args == "--platform=linux/arm64 alpine:3.20 AS rollhub-shim"
    assert final[0].args == "--platform=linux/arm64 python:3.11-slim"
    assert any(i.keyword == "RUN" and "-static" in i.args for i in build)
    assert [i.args for i in final if i.keyword == "COPY"] == [
        f"--from=rollhub-shim /rollhub-shim {SHIM_PATH}"
    ]


@pytest.mark.parametrize("bad", ["", "-v /:/host", "img\nRUN rm -rf /", "img\n", "a b"])
def test_bad_base_images_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="--base-image"):
        render_sandbox_dockerfile(bad)


def test_shim_source_found_beside_the_installed_sandbox_package() -> None:
    assert find_shim_source().resolve() == REPO_SHIM.resolve()


def test_explicit_shim_source_and_context(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--shim-source"):
        find_shim_source(tmp_path / "nope.c")
    dockerfile = write_sandbox_context(tmp_path / "ctx", "busybox:1.36", REPO_SHIM)
    assert dockerfile == tmp_path / "ctx" / "Dockerfile"
    assert (tmp_path / "ctx" / "shim.c").read_bytes() == REPO_SHIM.read_bytes()
    assert "FROM --platform=linux/arm64 busybox:1.36" in dockerfile.read_text()

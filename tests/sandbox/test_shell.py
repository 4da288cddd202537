"""The pure shell helpers: quoting, env names, timeouts, path resolution."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollhub_sandbox.errors import SandboxArgumentError, SandboxPathError
from rollhub_sandbox.shell import (
    check_env,
    check_sandbox_id,
    check_timeout,
    join_remote,
    shell_script,
)

from tests.sandbox.sandbox_helpers import NASTY, direct


@pytest.mark.parametrize("command", NASTY)
def test_shell_script_runs_the_command_exactly_as_sh_would(command: str, tmp_path) -> None:
    want = direct(command)
    got = direct(shell_script(command, cwd=str(tmp_path), env={}))
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
               max_size=40))
def test_any_text_survives_the_wrapper(text: str) -> None:
    # The value travels through env and through the command itself, both single-quoted.
    command = "printf '%s|' \"$V\"; printf '%s' " + _sq(text)
    got = direct(shell_script(command, cwd="/", env={"V": text}))
    assert got.returncode == 0, got.stderr
    assert got.stdout == f"{text}|{text}"


def _sq(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def test_failed_cd_does_not_run_the_command(tmp_path) -> None:
    marker = tmp_path / "ran"
    got = direct(shell_script(f"touch {marker}", cwd=str(tmp_path / "missing dir")))
    assert got.returncode == 2
    assert "missing dir" in got.stderr
    assert not marker.exists()


def test_cwd_with_odd_characters(tmp_path) -> None:
    odd = tmp_path / "a b'c\"d$e`f\nnl"
    odd.mkdir()
    got = direct(shell_script("pwd", cwd=str(odd)))
    assert got.stdout == f"{odd}\n"


@pytest.mark.parametrize("name", ["", "1X", "A-B", "A B", "A=B", "é", "$X", "X;rm"])
def test_env_names_must_be_identifiers(name: str) -> None:
    with pytest.raises(SandboxArgumentError, match="shell identifier"):
        check_env({name: "v"})


def test_env_values_must_be_strings_without_nul() -> None:
    assert check_env({"_A1": "x y"}) == {"_A1": "x y"}
    with pytest.raises(SandboxArgumentError):
        check_env({"A": "x\0y"})
    with pytest.raises(SandboxArgumentError):
        check_env({"A": 3})  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_timeouts_are_positive_finite_numbers(bad: object) -> None:
    with pytest.raises(SandboxArgumentError, match="timeout"):
        check_timeout(bad)  # type: ignore[arg-type]
    assert check_timeout(None) is None
    assert check_timeout(2) == 2.0


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".", "..", "x" * 300, "a b"])
def test_sandbox_ids_are_safe_names(bad: str) -> None:
    with pytest.raises(SandboxArgumentError, match="sandbox id"):
        check_sandbox_id(bad)


def test_join_remote_confines_paths() -> None:
    assert join_remote("/w", "a/../b", confine=True) == "/w/b"
    assert join_remote("/w", "/w/c", confine=True) == "/w/c"
    assert join_remote("/w", ".", confine=True) == "/w"
    for bad in ("../x", "/etc/passwd", "a/../../x", "/w2/x"):
        with pytest.raises(SandboxPathError, match="outside the sandbox workspace"):
            join_remote("/w", bad, confine=True)
    assert join_remote("/w", "/etc/passwd", confine=False) == "/etc/passwd"

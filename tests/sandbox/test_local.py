"""The local provider through the public async API: commands, files, timeouts, reaping."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rollhub_sandbox import (
    AsyncSandboxClient,
    SandboxArgumentError,
    SandboxFileError,
    SandboxNotFound,
    SandboxPathError,
    SandboxStartError,
)
from rollhub_sandbox.local import reap_root

from tests.sandbox.sandbox_helpers import NASTY, direct, pid_gone


@pytest.mark.parametrize("command", NASTY)
async def test_nasty_commands_run_exactly_as_sh_runs_them(client: AsyncSandboxClient,
                                                          command: str) -> None:
    async with client.start(ttl=60) as sb:
        got = await sb.exec(command, env={"HOME": "/home/x"})
    want = direct(command)
    assert (got.exit_code, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


async def test_exit_codes_and_stderr_are_results(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        r = await sb.exec("echo out; echo err >&2; exit 7")
        assert (r.exit_code, r.stdout, r.stderr, r.timed_out, r.ok) == (7, "out\n", "err\n", False, False)
        r = await sb.exec("kill -9 $$")
        assert r.exit_code == -9
        r = await sb.exec("definitely-not-a-command-xyz")
        assert r.exit_code == 127 and "not found" in r.stderr


async def test_env_and_cwd(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        await sb.exec("mkdir -p 'sub dir'")
        r = await sb.exec('pwd; printf "%s" "$ODD"', cwd="sub dir", env={"ODD": "it's $x `y`\n"})
        assert r.stdout == f"{sb.workdir}/sub dir\nit's $x `y`\n"
        r = await sb.exec("echo $ROLLHUB_SANDBOX_ID; echo $HOME")
        assert r.stdout == f"{sb.id}\n{sb.workdir}\n"
        with pytest.raises(SandboxArgumentError, match="shell identifier"):
            await sb.exec("true", env={"BAD-NAME": "x"})


async def test_failed_cd_does_not_run_the_command(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        r = await sb.exec("touch ran-here; touch ../ran-above", cwd="missing")
        assert r.exit_code == 2 and "missing" in r.stderr
        assert (await sb.exec("ls -A")).stdout == ""
        assert not (Path(sb.workdir).parent / "ran-above").exists()


async def test_stdin(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        r = await sb.exec("wc -c; cat >/dev/null", stdin=b"\x00\xff" * 500_000)
        assert r.stdout.strip() == "1000000"
        r = await sb.exec("cat", stdin="ünï\n")
        assert r.stdout == "ünï\n"
        r = await sb.exec("true", stdin=b"x" * 5_000_000)  # never read: must not hang
        assert r.exit_code == 0


async def test_timeout_kills_the_whole_tree(client: AsyncSandboxClient, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = (
        f"(trap '' TERM; sleep 60 & echo $! >> {pids}; wait) & echo $! >> {pids}; "
        f"setsid sh -c 'trap \"\" TERM; echo $$ >> {pids}; sleep 60' & "
        f"trap '' TERM; echo $$ >> {pids}; sleep 60"
    )
    async with client.start(ttl=60) as sb:
        started = time.monotonic()
        r = await sb.exec(script, timeout=1.0)
        elapsed = time.monotonic() - started
    assert r.timed_out and not r.ok
    assert r.exit_code == -9  # it ignored SIGTERM, so SIGKILL ended it
    assert 1.0 <= elapsed < 8
    recorded = [int(p) for p in pids.read_text().split()]
    assert len(recorded) == 4
    deadline = time.monotonic() + 5
    while not all(pid_gone(p) for p in recorded) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert [p for p in recorded if not pid_gone(p)] == []


async def test_background_job_holding_output_does_not_hang(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        started = time.monotonic()
        r = await sb.exec("sleep 30 & echo started")
        assert r.stdout == "started\n" and not r.timed_out
        assert time.monotonic() - started < 5


async def test_output_cap_and_truncation_flags(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        r = await sb.exec("head -c 20000000 /dev/zero | tr '\\0' a; head -c 5000 /dev/zero >&2",
                          max_output=1000)
        assert r.exit_code == 0  # the writer was drained, not blocked
        assert len(r.stdout) == 1000 and set(r.stdout) == {"a"}
        assert r.stdout_truncated and r.stderr_truncated and r.truncated
        r = await sb.exec("echo small", max_output=1000)
        assert not r.truncated and r.stdout == "small\n"
        with pytest.raises(SandboxArgumentError):
            await sb.exec("true", max_output=-1)


async def test_file_round_trip_binary_and_text(client: AsyncSandboxClient) -> None:
    blob = bytes(range(256)) * 4096
    async with client.start(ttl=60) as sb:
        await sb.write_file("deep/er/blob.bin", blob)
        assert await sb.read_file("deep/er/blob.bin") == blob
        await sb.write_file(f"{sb.workdir}/t.txt", "ünï\n")
        assert (await sb.exec("cat t.txt; wc -c < deep/er/blob.bin")).stdout == "ünï\n1048576\n"
        with pytest.raises(SandboxFileError, match="missing"):
            await sb.read_file("missing")
        with pytest.raises(SandboxFileError):
            await sb.read_file("deep")  # a directory


async def test_paths_may_not_escape_the_workspace(client: AsyncSandboxClient, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    async with client.start(ttl=60) as sb:
        for bad in ("../x", "/etc/passwd", str(secret), "a/../../x"):
            with pytest.raises(SandboxPathError):
                await sb.read_file(bad)
            with pytest.raises(SandboxPathError):
                await sb.write_file(bad, b"x")
        await sb.exec(f"ln -s {secret} link; ln -s / rootlink")
        with pytest.raises(SandboxPathError, match="symlink"):
            await sb.read_file("link")
        with pytest.raises(SandboxPathError, match="symlink"):
            await sb.write_file("rootlink/tmp/x", b"x")
        with pytest.raises(SandboxPathError):
            await sb.upload(tmp_path, "rootlink")
    assert secret.read_text() == "s"


async def test_template_and_upload(client: AsyncSandboxClient, template: Path, tmp_path: Path) -> None:
    src = tmp_path / "up"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "c.bin").write_bytes(b"\x00\x01\x02")
    (src / "top.txt").write_text("top")
    async with client.start(str(template), ttl=60) as sb:
        assert (await sb.exec("cat README; cat pkg/mod.py")).stdout == "template\nX = 1\n"
        await sb.upload(src, "dest")
        await sb.upload(src)  # into the workspace itself
        assert await sb.read_file("dest/a/b/c.bin") == b"\x00\x01\x02"
        assert await sb.read_file("top.txt") == b"top"
        with pytest.raises(SandboxArgumentError, match="not a directory"):
            await sb.upload(tmp_path / "nope")
    with pytest.raises(SandboxStartError, match="not a directory"):
        await client.create(str(tmp_path / "no-template"))


async def test_attach_from_another_client_and_unknown_ids(client: AsyncSandboxClient,
                                                          root: Path) -> None:
    sb = await client.create(ttl=60)
    other = AsyncSandboxClient("local", root=str(root))
    again = await other.attach(sb.id)
    await again.write_file("x", b"1")
    assert await sb.read_file("x") == b"1"
    await sb.destroy()
    await sb.destroy()  # idempotent
    with pytest.raises(SandboxNotFound):
        await other.attach(sb.id)
    with pytest.raises(SandboxNotFound):
        await again.exec("true")
    with pytest.raises(SandboxNotFound, match="sbx-0000"):
        await client.attach("sbx-0000")
    with pytest.raises(SandboxArgumentError):
        await client.attach("../../etc")


async def test_ttl_expiry_and_reaping(client: AsyncSandboxClient, root: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    sb = await client.create(ttl=1.5)
    await sb.exec(f"sleep 60 >/dev/null 2>&1 & echo $! > {pidfile}")
    keep = await client.create(ttl=60)
    bg = int(pidfile.read_text())
    assert not pid_gone(bg)
    await asyncio.sleep(1.6)
    with pytest.raises(SandboxNotFound, match="expired"):
        await sb.exec("true")
    assert await client.reap() == [sb.id]
    assert not (root / sb.id).exists()
    assert (root / keep.id).exists()
    deadline = time.monotonic() + 5
    while not pid_gone(bg) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert pid_gone(bg), "the reaper kills what an expired sandbox left running"
    await keep.destroy()


def test_reaping_across_processes(root: Path) -> None:
    code = (
        "import asyncio, sys; from rollhub_sandbox import AsyncSandboxClient\n"
        "async def main():\n"
        f"    sb = await AsyncSandboxClient('local', root={str(root)!r}).create(ttl=0.2)\n"
        "    print(sb.id)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    sid = out.stdout.strip()
    assert (root / sid / "sandbox.json").exists()
    assert reap_root(root, now=time.time() + 1) == [sid]
    assert not (root / sid).exists()
    # leftovers of an interrupted creation are removed once stale
    stale = root / ".tmp-sbx-dead"
    stale.mkdir()
    os.utime(stale, (0, 0))
    reap_root(root)
    assert not stale.exists()


async def test_twenty_concurrent_sandboxes(client: AsyncSandboxClient) -> None:
    async def one(i: int) -> str:
        async with client.start(ttl=60) as sb:
            await sb.write_file("n", str(i))
            r = await sb.exec("sleep 0.2; cat n; echo; echo $ROLLHUB_SANDBOX_ID", timeout=30)
            assert r.exit_code == 0
            assert r.stdout.split()[1] == sb.id
            return r.stdout.split()[0]

    started = time.monotonic()
    got = await asyncio.gather(*(one(i) for i in range(20)))
    assert got == [str(i) for i in range(20)]
    assert time.monotonic() - started < 15  # they ran concurrently, not 20 x 0.2 s serially + …


async def test_bad_arguments(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        for bad in ("", "   ", "a\0b"):
            with pytest.raises(SandboxArgumentError, match="command"):
                await sb.exec(bad)
        with pytest.raises(SandboxArgumentError, match="timeout"):
            await sb.exec("true", timeout=0)
        with pytest.raises(SandboxArgumentError, match="data"):
            await sb.write_file("x", 3)  # type: ignore[arg-type]
    with pytest.raises(SandboxArgumentError, match="ttl"):
        await client.create(ttl=-1)


async def test_cancelling_exec_kills_the_command(client: AsyncSandboxClient, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    async with client.start(ttl=60) as sb:
        task = asyncio.ensure_future(sb.exec(f"sleep 30 & echo $! >> {pids}; echo $$ >> {pids}; wait"))
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        recorded = [int(p) for p in pids.read_text().split()]
        deadline = time.monotonic() + 5
        while not all(pid_gone(p) for p in recorded) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert all(pid_gone(p) for p in recorded)
        # the loop is left clean: many commands at once still get their own output
        results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(40)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]


async def test_read_file_refuses_fifos_and_files_over_the_limit(root: Path) -> None:
    client = AsyncSandboxClient("local", root=str(root), max_file_bytes=1 << 20)
    async with client.start(ttl=60) as sb:
        await sb.exec("mkfifo pipe; truncate -s 300M big; head -c 100 /dev/zero > small")
        fifo = os.path.join(sb.workdir, "pipe")
        try:
            with pytest.raises(SandboxFileError, match="not a regular file"):
                await asyncio.wait_for(sb.read_file("pipe"), 5)
            with pytest.raises(SandboxFileError, match="limit"):
                await sb.read_file("big")
            with pytest.raises(SandboxFileError):
                await asyncio.wait_for(sb.write_file("pipe", b"x"), 5)
        finally:
            # a reader stuck in open() (the old behaviour) is released by opening the writer
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        assert await sb.read_file("small") == bytes(100)


async def test_upload_and_replace_never_write_through_symlinks(client: AsyncSandboxClient,
                                                               tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host")
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.py").write_text("pristine")
    async with client.start(ttl=60) as sb:
        await sb.exec(f"mkdir d && ln -s {victim} d/t.py && echo extra > d/extra && chmod 555 d")
        with pytest.raises(SandboxFileError):
            await sb.upload(src, "d")  # merging: the link is refused, not followed
        assert victim.read_text() == "host"
        await sb.replace(src, "d")  # replacing: the old tree goes, links and all
        assert victim.read_text() == "host"
        assert (await sb.exec("ls -A d; cat d/t.py")).stdout == "t.py\npristine"


async def test_kill_all_stops_background_jobs(client: AsyncSandboxClient, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    async with client.start(ttl=60) as sb:
        await sb.exec(f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 60' >/dev/null 2>&1 &")
        deadline = time.monotonic() + 5
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        pid = int(pidfile.read_text())
        assert not pid_gone(pid)
        assert await sb.kill_all() is True
        deadline = time.monotonic() + 5
        while not pid_gone(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert pid_gone(pid)
        assert (await sb.exec("echo alive")).stdout == "alive\n"  # the sandbox itself lives on


async def test_cwd_outside_the_workspace_is_a_path_error(client: AsyncSandboxClient) -> None:
    async with client.start(ttl=60) as sb:
        for cwd in ("..", "/etc", "a/../../.."):
            with pytest.raises(SandboxPathError):
                await sb.exec("pwd", cwd=cwd)
        assert (await sb.exec("pwd", cwd=".")).stdout.strip() == sb.workdir

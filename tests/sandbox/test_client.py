"""The public API surface: sync twins, provider lookup, errors, registration, isolation."""

from __future__ import annotations

import inspect
import pickle
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import rollhub_sandbox
from rollhub.errors import ConfigError, RollhubError, UnknownComponentError, UsageError
from rollhub.plugins import PluginHost
from rollhub_sandbox import (
    AsyncSandbox,
    AsyncSandboxClient,
    Sandbox,
    SandboxClient,
    SandboxError,
    SandboxFileError,
    SandboxNotFound,
    SandboxPathError,
    SandboxProviderError,
    SandboxStartError,
)
from rollhub_sandbox import plugin as sandbox_plugin

from tests.sandbox.sandbox_helpers import needs_bwrap


def _public(cls: type) -> list[str]:
    return [n for n, _ in inspect.getmembers(cls) if not n.startswith("_")]


def _in_order(cls: type) -> list[str]:
    return [n for n in cls.__dict__ if not n.startswith("_")]


def test_sync_twins_have_the_same_methods_in_the_same_order() -> None:
    assert _in_order(Sandbox) == _in_order(AsyncSandbox)
    bridges = {"start_async", "create_async", "attach_async"}
    sync = [n for n in _in_order(SandboxClient) if n not in bridges]
    asyn = ["close" if n == "aclose" else n for n in _in_order(AsyncSandboxClient)]
    assert sync == asyn
    for name in _public(Sandbox):
        a, s = getattr(AsyncSandbox, name), getattr(Sandbox, name)
        if callable(a):
            assert list(inspect.signature(a).parameters) == list(inspect.signature(s).parameters)


def test_sync_client_round_trip(sync_client: SandboxClient, template: Path) -> None:
    with sync_client.start(str(template), ttl=60) as sb:
        assert isinstance(sb, Sandbox)
        r = sb.exec("cat README; echo $X", env={"X": "y"})
        assert (r.exit_code, r.stdout) == (0, "template\ny\n")
        sb.write_file("b.bin", b"\x00\xff")
        assert sync_client.attach(sb.id).read_file("b.bin") == b"\x00\xff"
        r = sb.exec("sleep 30", timeout=0.3)
        assert r.timed_out
    with pytest.raises(SandboxNotFound):
        sync_client.attach(sb.id)


def test_sync_client_from_many_threads(sync_client: SandboxClient) -> None:
    def one(i: int) -> str:
        with sync_client.start(ttl=60) as sb:
            return sb.exec(f"echo {i}").stdout.strip()

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(16))) == [str(i) for i in range(16)]


async def test_sync_call_inside_a_running_loop_is_a_usage_error(sync_client: SandboxClient) -> None:
    with pytest.raises(UsageError, match="start_async"):
        sync_client.create(ttl=60)
    async with sync_client.start_async(ttl=60) as sb:
        assert isinstance(sb, AsyncSandbox)
        assert (await sb.exec("echo ok")).stdout == "ok\n"
        again = await sync_client.attach_async(sb.id)
        assert again.id == sb.id


async def test_async_start_destroys_even_on_error(client: AsyncSandboxClient, root: Path) -> None:
    with pytest.raises(RuntimeError):
        async with client.start(ttl=60) as sb:
            raise RuntimeError("boom")
    assert not (root / sb.id).exists()


def test_provider_lookup_and_option_errors() -> None:
    with pytest.raises(UnknownComponentError, match=r"'lcoal'.*local"):
        AsyncSandboxClient("lcoal")
    with pytest.raises(ConfigError, match="isolation"):
        AsyncSandboxClient("local", isolation="chroot")
    with pytest.raises(ConfigError, match=r"env.*shell identifier"):
        AsyncSandboxClient("local", env={"NOT-OK": "x"})
    with pytest.raises(ConfigError, match="bogus"):
        AsyncSandboxClient("local", bogus=1)
    with pytest.raises(ConfigError, match=r"options\.isolaton' \(did you mean 'isolation'\?\)"):
        AsyncSandboxClient("local", isolaton="bwrap")
    with pytest.raises(ConfigError, match="runtime_arn"):
        AsyncSandboxClient("agentcore")


def test_errors_are_typed_and_picklable() -> None:
    errors = [
        SandboxNotFound("gone", sandbox_id="sbx-1"),
        SandboxPathError("escape", path="../x", workspace="/w"),
        SandboxFileError("missing", path="x", sandbox_id="sbx-1"),
        SandboxStartError("nope", source="img"),
        SandboxProviderError("throttled", transient=True, code="ThrottlingException"),
    ]
    for err in errors:
        assert isinstance(err, SandboxError) and isinstance(err, RollhubError)
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.context == err.context
    assert isinstance(errors[0], LookupError) and isinstance(errors[1], ValueError)
    assert isinstance(errors[2], OSError)
    assert pickle.loads(pickle.dumps(errors[4])).transient is True


def test_exports_are_sorted_and_complete() -> None:
    assert rollhub_sandbox.__all__ == sorted(rollhub_sandbox.__all__)
    for name in rollhub_sandbox.__all__:
        assert hasattr(rollhub_sandbox, name)


def test_plugin_registers_the_providers() -> None:
    host = PluginHost()
    host.register(sandbox_plugin, name="sandbox")
    assert host.registry.names("sandbox_provider") == ["agentcore", "docker", "local"]
    cls = host.registry.get("sandbox_provider", "local")
    client = AsyncSandboxClient("local", registry=host.registry)
    assert isinstance(client.provider, cls)
    assert hasattr(sandbox_plugin, "rollhub_collect_rewards")


# Isolation -------------------------------------------------------------------------------


@needs_bwrap
async def test_bwrap_hides_the_host_and_the_network(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("s")
    client = AsyncSandboxClient("local", root=str(root), isolation="bwrap", kill_grace=0.3)
    async with client.start(ttl=60) as sb:
        assert sb.workdir == "/workspace"
        r = await sb.exec(f"pwd; test -e {secret} && echo visible; test -e {root} && echo root; "
                          f"echo hi > note; ls /")
        assert r.stdout.splitlines()[0] == "/workspace"
        assert "visible" not in r.stdout and "root" not in r.stdout.splitlines()
        assert await sb.read_file("note") == b"hi\n"
        await sb.write_file("/workspace/in.txt", "x")
        assert (await sb.exec("cat in.txt")).stdout == "x"
        with pytest.raises(SandboxPathError):
            await sb.read_file(str(secret))
        r = await sb.exec("cat /proc/net/dev | wc -l; ls /sys/class/net 2>/dev/null || true")
        # only the header lines and loopback: no host interface
        assert int(r.stdout.split()[0]) <= 3
        r = await sb.exec("sleep 30", timeout=0.5)
        assert r.timed_out
        assert (await sb.exec("ls -A /tmp")).stdout == ""


@needs_bwrap
async def test_bwrap_ro_binds(root: Path, tmp_path: Path) -> None:
    shared = tmp_path / "tools"
    shared.mkdir()
    (shared / "tool.sh").write_text("echo tool-ran")
    client = AsyncSandboxClient("local", root=str(root), isolation="bwrap", ro_binds=[str(shared)])
    async with client.start(ttl=60) as sb:
        assert (await sb.exec(f"sh {shared}/tool.sh")).stdout == "tool-ran\n"
        r = await sb.exec(f"echo x > {shared}/tool.sh")
        assert r.exit_code != 0  # read-only
        # each command has its own namespaces: background jobs end with it
        await sb.exec("nohup sleep 60 >/dev/null 2>&1 &")
        assert "sleep 60" not in (await sb.exec("ps -eo args")).stdout
    assert (shared / "tool.sh").read_text() == "echo tool-ran"
    bad = AsyncSandboxClient("local", root=str(root), isolation="bwrap",
                             ro_binds=[str(tmp_path / "missing")])
    with pytest.raises(SandboxStartError, match="missing"):
        await bad.create(ttl=60)


@needs_bwrap
async def test_bwrap_blocks_connections_to_host_servers(root: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        client = AsyncSandboxClient("local", root=str(root), isolation="bwrap")
        async with client.start(ttl=60) as sb:
            code = (f"import socket; s=socket.socket(); s.settimeout(2); "
                    f"print(s.connect_ex(('127.0.0.1', {port})))")
            r = await sb.exec(f"python3 -c \"{code}\"")
            assert r.exit_code == 0 and r.stdout.strip() != "0"
    finally:
        srv.close()


async def test_isolation_auto_and_unavailable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rollhub_sandbox import local

    monkeypatch.setattr(local, "bwrap_status", lambda: (False, "bwrap is not installed"))
    with pytest.raises(SandboxStartError, match="not installed"):
        await AsyncSandboxClient("local", root=str(root), isolation="bwrap").create(ttl=60)
    async with AsyncSandboxClient("local", root=str(root), isolation="auto").start(ttl=60) as sb:
        assert sb.workdir != "/workspace"
        assert (await sb.exec("echo plain")).stdout == "plain\n"


def test_sync_loop_thread_starts_on_use_and_stops_on_close(root: Path) -> None:
    def loop_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "rollhub-sandbox-loop"}

    before = loop_threads()  # other clients' threads
    c = SandboxClient("local", root=str(root))
    assert loop_threads() == before  # nothing runs until a sync call needs it
    with c.start(ttl=60) as sb:
        sb.exec("true")
        (mine,) = loop_threads() - before
    c.close()
    assert not mine.is_alive() and loop_threads() <= before

"""The local Tinker-compatible server: setup, loopback serving, and a real RL step through
the ``tinker`` SDK (0.22.4 to 0.24.1) against skyrl's JAX engine on CPU."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import tinker
from rollhub.errors import ConfigError, UsageError
from rollhub_tinker import local_server as local_server_module
from rollhub_tinker import local_server_cli, local_server_env
from rollhub_tinker.local_server import LocalTinkerServer, SetupInfo, default_env_dir
from tinker import types

from tests.plugins.tinker import local_server as fixtures
from tests.plugins.tinker.local_server import StartServer

# The shared fixtures, bound here (a conftest may import them for other modules too).
tinker_local_env = fixtures.tinker_local_env
tinker_server_factory = fixtures.tinker_server_factory

PROMPT = "Question: what is 2 + 3? Answer:"
T = TypeVar("T")


# -- without the environment --------------------------------------------------------------


def test_default_env_dir_follows_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ROLLHUB_TINKER_LOCAL_DIR", str(tmp_path / "here"))
    assert default_env_dir() == tmp_path / "here"
    assert LocalTinkerServer().env_dir == tmp_path / "here"
    monkeypatch.delenv("ROLLHUB_TINKER_LOCAL_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_env_dir() == tmp_path / "cache" / "rollhub" / "tinker-local"


@pytest.mark.parametrize(
    ("option", "value"),
    [("session_timeout_sec", 0), ("max_lora_adapters", 1), ("max_lora_rank", "8")],
)
def test_bad_options_name_the_field(option: str, value: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=option) as info:
        LocalTinkerServer(tmp_path, **{option: value})  # type: ignore[arg-type]
    assert info.value.field == option


def test_unstarted_server_has_no_url_and_rejects_bad_ports(tmp_path: Path) -> None:
    server = LocalTinkerServer(tmp_path)
    with pytest.raises(UsageError, match="start"):
        _ = server.base_url
    with pytest.raises(ConfigError, match="port") as info:
        server.start(port=70000)
    assert info.value.field == "port"
    assert not server.running and server.pid is None
    server.stop()  # stopping what never started is a no-op


def test_an_empty_directory_is_not_set_up(tmp_path: Path) -> None:
    server = LocalTinkerServer(tmp_path)
    assert not server.is_set_up()
    assert server.base_model == str(tmp_path / "models" / "smollm2-135m-instruct")


def test_servers_share_a_compilation_cache_unless_the_user_chose_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    env = LocalTinkerServer(tmp_path)._server_env()
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax-cache")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "2")
    env = LocalTinkerServer(tmp_path)._server_env()
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "mine")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "2"


def test_a_missing_python_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(local_server_env, "SERVER_PYTHON", (3, 99))
    with pytest.raises(ConfigError, match=r"Python 3\.11") as info:
        LocalTinkerServer(tmp_path).setup()
    assert info.value.field == "python"


# -- with the environment (built once per machine, then reused) ---------------------------


@pytest.mark.slow
def test_setup_is_idempotent_and_keyed_on_the_pins(
    tinker_local_env: SetupInfo, tmp_path: Path
) -> None:
    server = LocalTinkerServer(tinker_local_env.env_dir)
    stamp = tinker_local_env.env_dir / "venv" / ".rollhub-stamp"
    before = stamp.stat().st_mtime_ns
    again = server.setup()
    assert again.reused and again.seconds < 5
    assert stamp.stat().st_mtime_ns == before  # nothing was rebuilt
    assert stamp.read_text().strip() == server.expected_stamp()
    assert (again.model_dir / "model.safetensors").exists()
    assert (again.model_dir / "tokenizer.json").exists()
    # Another pin means another environment: the stamp no longer matches.
    changed = tmp_path / "requirements.txt"
    changed.write_text(server.requirements.read_text().replace("skyrl==0.3.0", "skyrl==0.3.1"))
    assert not LocalTinkerServer(tinker_local_env.env_dir, requirements=changed).is_set_up()


#: the ports the module's server was offered, and the one something else held
OFFERED: dict[str, Any] = {"ports": []}


@pytest.fixture(scope="module")
def server(tinker_server_factory: StartServer) -> Iterator[LocalTinkerServer]:
    """One server for this module, stopped when the module ends to give its memory back.

    Its first port is already listened on, as when something binds the probed port before
    the server does (seconds later, after its imports): it must start on another."""
    real = local_server_module._free_port
    with socket.socket() as holder, pytest.MonkeyPatch.context() as mp:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        OFFERED["taken"] = holder.getsockname()[1]

        def offer() -> int:
            port = OFFERED["taken"] if not OFFERED["ports"] else real()
            OFFERED["ports"].append(port)
            return int(port)

        mp.setattr(local_server_module, "_free_port", offer)
        started = tinker_server_factory()
    yield started
    started.stop()


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_is_replaced(server: LocalTinkerServer) -> None:
    first, second = OFFERED["ports"]
    assert first == OFFERED["taken"] and server.port == second != first
    text = server.log_path.read_text()
    assert "address already in use" in " ".join(text.lower().split())
    # the first server exited by itself, its owner still there: cleanly, not by an abort
    assert "Fatal Python error" not in text


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the listening TCP sockets on ``port`` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                address, port_hex = local.rsplit(":", 1)
                if state == "0A" and int(port_hex, 16) == port:
                    found.add(address)
    return found


@pytest.mark.slow
def test_serves_on_loopback_only(server: LocalTinkerServer) -> None:
    assert server.running and server.port is not None
    assert server.base_url == f"http://127.0.0.1:{server.port}"
    # 0100007F is 127.0.0.1 in the kernel's byte order; nothing else and no IPv6 socket.
    assert _listening_addresses(server.port) == {"0100007F"}
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):
        pass
    ready_file = server.state_dir / "engine.ready"
    assert ready_file.exists()
    # The checkpoints and the database sit in the state directory, nowhere else.
    assert (server.state_dir / "tinker.db").exists()
    # JAX was told the shared compilation cache, and has written its programs there.
    environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    cache = server.compilation_cache_dir
    assert f"JAX_COMPILATION_CACHE_DIR={cache}".encode() in environ
    assert any(cache.glob("*-cache")), f"no compiled program in {cache}"


@pytest.mark.slow
def test_rl_step_through_the_tinker_sdk(
    server: LocalTinkerServer, request: pytest.FixtureRequest
) -> None:
    timings: dict[str, float] = {}

    def timed(name: str, call: Callable[[], T]) -> T:
        started = time.monotonic()
        result = call()
        timings[name] = round(time.monotonic() - started, 2)
        return result

    service = tinker.ServiceClient(base_url=server.base_url, api_key="tml-local")
    request.addfinalizer(lambda: _close_session(service))
    training = timed(
        "create_lora_training_client",
        lambda: service.create_lora_training_client(base_model=server.base_model, rank=8),
    )
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode(PROMPT)
    sampler = timed(
        "save_weights_and_get_sampling_client", training.save_weights_and_get_sampling_client
    )
    params = types.SamplingParams(max_tokens=8, temperature=1.0, seed=7)
    response = timed(
        "sample (2 x 8 tokens, first: compiles)",
        lambda: sampler.sample(types.ModelInput.from_ints(prompt), 2, params).result(),
    )
    sequences = response.sequences
    assert len(sequences) == 2
    for seq in sequences:
        assert 1 <= len(seq.tokens) <= 8
        assert seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        assert all(math.isfinite(lp) and lp <= 0 for lp in seq.logprobs)

    before = timed(
        "compute_logprobs",
        lambda: _completion_logprob(sampler, prompt, sequences[0].tokens),
    )
    # The server scores a prompt as the sampler did: the same sum as the sampled logprobs.
    assert math.isclose(before, sum(sequences[0].logprobs), abs_tol=0.05)
    before_penalised = _completion_logprob(sampler, prompt, sequences[1].tokens)

    # The first completion is rewarded (+1), the second penalised (-1).
    data = [
        _datum(prompt, seq.tokens, seq.logprobs, advantage)
        for seq, advantage in zip(sequences, (1.0, -1.0), strict=True)
    ]
    output = timed(
        "forward_backward importance_sampling",
        lambda: training.forward_backward(data, "importance_sampling").result(),
    )
    assert len(output.loss_fn_outputs) == 2
    for datum, seq, out in zip(data, sequences, output.loss_fn_outputs, strict=True):
        learner = out["logprobs"].tolist()
        assert len(learner) == datum.model_input.length
        # Before the update the learner and the sampler hold the same weights.
        sampled = learner[len(prompt) - 1 :]
        assert max(abs(a - b) for a, b in zip(sampled, seq.logprobs, strict=True)) < 0.05
    timed(
        "optim_step",
        lambda: training.optim_step(types.AdamParams(learning_rate=1e-3)).result(),
    )
    updated = timed(
        "save_weights_and_get_sampling_client (updated)",
        training.save_weights_and_get_sampling_client,
    )
    after = timed(
        "compute_logprobs (new sampler)",
        lambda: _completion_logprob(updated, prompt, sequences[0].tokens),
    )
    after_penalised = _completion_logprob(updated, prompt, sequences[1].tokens)
    # A sampling client is a snapshot: the first one still samples the weights it was made
    # from, and serving it leaves the training weights alone.
    old = timed(
        "compute_logprobs (first sampler, after the update)",
        lambda: _completion_logprob(sampler, prompt, sequences[0].tokens),
    )
    assert math.isclose(old, before, abs_tol=0.05)
    trained = timed(
        "forward (training weights)",
        lambda: training.forward(data[:1], "importance_sampling").result(),
    )
    learner_after = sum(trained.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :])
    assert math.isclose(learner_after, after, abs_tol=0.05)
    resampled = timed(
        "sample (new sampler)",
        lambda: updated.sample(types.ModelInput.from_ints(prompt), 2, params).result(),
    )
    print(f"\ntinker-local timings (s): {timings}")
    print(
        f"+1 completion logprob: {before:.2f} -> {after:.2f}; peak RSS: {server.peak_rss_bytes()}"
    )
    print(f"-1 completion logprob: {before_penalised:.2f} -> {after_penalised:.2f}")
    assert after > before + 0.5
    assert after_penalised < before_penalised
    assert len(resampled.sequences) == 2 and resampled.sequences[0].logprobs is not None


@pytest.mark.slow
def test_loss_definitions_match_the_server(
    server: LocalTinkerServer, request: pytest.FixtureRequest
) -> None:
    """rollhub's figure of each RL loss (used when a server reports none) is the server's
    own sum of per-position losses, with ratios inside and outside the clip."""
    from rollhub_tinker.losses import token_loss

    service = tinker.ServiceClient(base_url=server.base_url, api_key="tml-local")
    request.addfinalizer(lambda: _close_session(service))
    training = service.create_lora_training_client(base_model=server.base_model, rank=8)
    tokenizer = training.get_tokenizer()
    prompt = tokenizer.encode(PROMPT)
    answer = tokenizer.encode(" 5, since two plus three is five.")
    probe = _datum(prompt, answer, [0.0] * len(answer), 0.0)
    learner = training.forward([probe], "importance_sampling").result()
    scored = learner.loss_fn_outputs[0]["logprobs"].tolist()[len(prompt) - 1 :]
    # sampler logprobs that put the ratio at e^-1, e, and near 1, advantages of both signs
    shifts = [(1.0, -1.0, 0.05)[i % 3] for i in range(len(answer))]
    sampler = [lp + shift for lp, shift in zip(scored, shifts, strict=True)]
    advantages = [(1.0, -1.0)[i % 2] for i in range(len(answer))]
    full = [*prompt, *answer]
    pad = [0.0] * (len(prompt) - 1)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={"target_tokens": full[1:], "logprobs": [*pad, *sampler],
                        "advantages": [*pad, *advantages]},
    )  # fmt: skip
    for loss_fn, config in [("importance_sampling", None), ("ppo", None), ("cispo", None),
                            ("ppo", {"clip_low_threshold": 0.5, "clip_high_threshold": 1.5})]:
        out = training.forward([datum], loss_fn, config).result().loss_fn_outputs[0]
        mine = out["logprobs"].tolist()[len(prompt) - 1 :]
        clip = (0.8, 1.2) if config is None else (0.5, 1.5)
        want = math.fsum(out["elementwise_loss"].tolist())
        got = math.fsum(token_loss(loss_fn, lp, s, a, clip)
                        for lp, s, a in zip(mine, sampler, advantages, strict=True))  # fmt: skip
        assert got == pytest.approx(want, rel=1e-4, abs=1e-4), (loss_fn, config)


@pytest.mark.slow
def test_stop_leaves_no_process_behind(server: LocalTinkerServer) -> None:
    group = server.pid
    port = server.port
    assert group is not None and port is not None
    members = local_server_module._group_members(group)
    assert len(members) >= 2  # the API process and its engine
    server.stop()
    assert not server.running
    assert local_server_module._group_members(group) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _datum(
    prompt: list[int], tokens: list[int], logprobs: list[float], advantage: float
) -> types.Datum:
    """An importance-sampling Datum: targets shifted by one, advantages on sampled tokens only."""
    full = [*prompt, *tokens]
    padding = [0.0] * (len(prompt) - 1)
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": [*padding, *logprobs],
            "advantages": [*padding, *([advantage] * len(tokens))],
        },
    )


def _completion_logprob(sampler: Any, prompt: list[int], tokens: list[int]) -> float:
    """Sum of the sampler's logprobs of ``tokens`` after ``prompt``.

    Counted from the end: skyrl returns one value per position after the first, where the
    hosted service puts a leading None.
    """
    logprobs = sampler.compute_logprobs(types.ModelInput.from_ints([*prompt, *tokens])).result()
    return float(sum(logprobs[-len(tokens) :]))


# -- the command line ---------------------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rollhub tinker-local")
    local_server_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_cli_needs_a_subcommand() -> None:
    with pytest.raises(UsageError, match="setup or serve"):
        local_server_cli.run(_parse())


def test_cli_backend_options_are_json_or_text() -> None:
    args = _parse("serve", "--backend-option", "sample_max_num_sequences=8")
    assert local_server_cli._backend_options(args.backend_option) == {"sample_max_num_sequences": 8}
    assert local_server_cli._backend_options(["mode=fast"]) == {"mode": "fast"}
    with pytest.raises(ConfigError, match="KEY=VALUE") as info:
        local_server_cli._backend_options(["sample_max_num_sequences"])
    assert info.value.field == "backend-option"


@pytest.mark.slow
def test_cli_setup_reports_an_environment_that_is_up_to_date(
    tinker_local_env: SetupInfo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert local_server_cli.run(_parse("setup", "--env-dir", str(tinker_local_env.env_dir))) == 0
    out = capsys.readouterr().out
    assert "up to date" in out
    assert f"base_model: {tinker_local_env.model_dir}" in out


_CLI = (
    "import argparse, sys\n"
    "from rollhub_tinker import local_server_cli as cli\n"
    "parser = argparse.ArgumentParser()\n"
    "cli.add_arguments(parser)\n"
    "sys.exit(cli.run(parser.parse_args(sys.argv[1:])))\n"
)


@pytest.mark.slow
def test_cli_serve_prints_what_to_configure_and_stops_on_ctrl_c(
    tinker_local_env: SetupInfo, tmp_path: Path
) -> None:
    port = local_server_module._free_port()
    state = tmp_path / "cli-state"
    command = [sys.executable, "-c", _CLI, "serve", "--port", str(port)]
    command += ["--env-dir", str(tinker_local_env.env_dir), "--state-dir", str(state)]
    command += ["--backend-option", "sample_max_num_sequences=8"]
    # started with SIGINT ignored, as a background job of a script is: Ctrl-C still stops it
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("serving until Ctrl-C"):
                break
        assert lines and lines[-1].startswith("serving until Ctrl-C"), "\n".join(lines)
        assert f'  base_url = "http://127.0.0.1:{port}"' in lines
        assert f'  base_model = "{tinker_local_env.model_dir}"' in lines
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/rollhub/ready", timeout=5) as r:
            assert r.status == 200
        # The engine got the backend option, over the default of 4.
        assert _processes_mentioning('"sample_max_num_sequences": 8')
        process.send_signal(signal.SIGINT)
        # stop() allows the engine 15 s, then SIGKILLs
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert _processes_mentioning(str(state)) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


@pytest.mark.slow
def test_a_killed_cli_leaves_no_server_behind(tinker_local_env: SetupInfo, tmp_path: Path) -> None:
    # SIGKILL gives `rollhub tinker-local serve` no chance to stop its server: the server
    # notices its owner's pipe close and stops its whole process group itself
    state = tmp_path / "killed-state"
    command = [sys.executable, "-c", _CLI, "serve", "--port", str(local_server_module._free_port())]
    command += ["--env-dir", str(tinker_local_env.env_dir), "--state-dir", str(state)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("serving until Ctrl-C"):
                break
        assert len(_processes_mentioning(str(state))) >= 1
        process.kill()
        process.wait(timeout=10)
        deadline = time.monotonic() + 60
        while _processes_mentioning(str(state)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_mentioning(str(state)) == []
    finally:
        if process.poll() is None:
            process.kill()
        for pid in _processes_mentioning(str(state)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
    return found


def _close_session(service: tinker.ServiceClient) -> None:
    """Stop the SDK session's heartbeat, as the plugin's trainer does on close (the SDK has
    no public close): left running, it outlives the server and warns until the process ends."""
    holder = getattr(service, "_session_holder", None)
    if holder is not None:
        holder.close()

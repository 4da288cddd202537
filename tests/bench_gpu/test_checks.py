"""The checks' parts that run without a GPU: the token comparison, the derived TRL config
(checked by rollhub and by TRL's GRPOConfig), the server command lines (parsed by the real
``trl vllm-serve`` and ``rollhub gateway serve`` parsers), the verdicts, and the processes."""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

import pytest
from gpucheck import checks
from gpucheck.checks import Context, compare_tokens, derive_trl_config, to_toml
from gpucheck.procs import Server, free_port, run_logged


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Context(venv=tmp_path / "venv", work=tmp_path / "work", port=8800)


# gateway-vs-vllm ----------------------------------------------------------------------------


def test_equal_tokens_compare_clean():
    figures = compare_tokens([([1, 2, 3], [-0.1, -0.2, -0.3], [1, 2, 3], [-0.1, -0.2, -0.3]),
                              ([7], [-1.0], [7], [-1.0])])  # fmt: skip
    assert figures == {"prompts": 2, "tokens": 4, "id_mismatches": 0, "max_abs_dlogprob": 0.0}


def test_differing_ids_lengths_and_logprobs_are_counted():
    figures = compare_tokens([
        ([1, 2, 3], [-0.1, -0.2, -0.3], [1, 9, 3], [-0.1, -5.0, -0.30002]),  # id 2 != 9
        ([4, 5], [-1.0, -1.0], [4, 5, 6], [-1.0, -1.0, -2.0]),  # vLLM went one token further
    ])  # fmt: skip
    assert figures["tokens"] == 5
    assert figures["id_mismatches"] == 2
    # only positions whose ids agree count towards the logprob difference
    assert figures["max_abs_dlogprob"] == pytest.approx(2e-5)


def test_no_tokens_means_no_logprob_figure():
    assert compare_tokens([([], [], [], [])])["max_abs_dlogprob"] is None


def test_gateway_command_is_what_rollhub_gateway_serve_accepts(ctx):
    from rollhub.cli import build_parser  # the real CLI
    from rollhub_gateway.cli import build_config

    argv = checks.gateway_argv(ctx, 8801, 8800, "tok")
    assert Path(argv[0]).name == "rollhub"
    args = build_parser().parse_args(argv[1:])
    config = build_config(args)
    engine = config.model_dump()["engine"]
    assert engine["name"] == "vllm"
    assert engine["options"] == {"base_url": "http://127.0.0.1:8800", "model": checks.SERVED}
    assert config.port == 8801 and config.host == "127.0.0.1" and config.admin_token == "tok"
    assert config.model == str(ctx.model_dir)


def test_vllm_serves_the_saved_model_under_the_engines_name(ctx):
    argv = checks.vllm_argv(ctx, 8800)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--model"] == str(ctx.model_dir)
    assert flags["--served-model-name"] == checks.SERVED
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8800"
    assert "--no-enable-prefix-caching" in argv


def test_smollm2_is_saved_once_next_to_the_run_folders(ctx, tmp_path):
    assert ctx.model_dir == tmp_path / "models" / "smollm2-135m-instruct"
    assert ctx.prepare_model_argv()[-2:] == ["smollm2-135m-instruct", str(ctx.model_dir)]
    local = Context(venv=ctx.venv, work=ctx.work, model=str(tmp_path))
    assert local.model_dir == tmp_path  # a local directory is served as it is


# trl-grpo-vllm ------------------------------------------------------------------------------


def derived(tmp_path: Path) -> dict:
    source = tomllib.loads(checks.TRL_EXAMPLE.read_text())
    return derive_trl_config(source, checks.TRL_EXAMPLE.parent, tmp_path, tmp_path / "model",
                             "http://127.0.0.1:8802")  # fmt: skip


def test_derived_trl_config_samples_from_trls_server_through_the_gateway(tmp_path):
    cfg = derived(tmp_path)
    assert cfg["trainer"]["use_vllm"] is True
    assert cfg["trainer"]["args"]["vllm_mode"] == "server"
    assert cfg["trainer"]["args"]["vllm_server_base_url"] == "http://127.0.0.1:8802"
    assert cfg["trainer"]["args"]["loss_type"] == "dapo"  # the example's own args are kept
    assert cfg["token_source"]["engine"] == {
        "name": "vllm", "options": {"base_url": "http://127.0.0.1:8802", "model": str(tmp_path / "model")},
    }  # fmt: skip
    assert cfg["training"]["steps"] == 1 and "eval" not in cfg
    for path in (cfg["experiment"]["dataset"], cfg["runtime"]["app"].partition(":")[0],
                 cfg["token_source"]["chat_template"]):  # fmt: skip
        assert Path(path).is_absolute() and Path(path).is_file(), path
    assert tomllib.loads(to_toml(cfg)) == cfg  # the TOML written is the config derived


def test_derived_trl_config_passes_rollhubs_config_check_and_trls_grpo_config(tmp_path, capsys):
    from rollhub.commands import config as config_command
    from rollhub.config import load_config
    from rollhub_trl.trainer import TrlTrainer, TrlTrainerOptions

    cfg = derived(tmp_path)
    path = tmp_path / "train-trl-gpu.toml"
    path.write_text(to_toml(cfg))
    (tmp_path / "model").mkdir()  # the check saves the model before the config is checked
    assert config_command.run(argparse.Namespace(file=str(path))) == 0
    assert "trainer=trl" in capsys.readouterr().out
    options = TrlTrainerOptions(**{k: v for k, v in cfg["trainer"].items() if k != "name"})
    grpo = TrlTrainer(options).grpo_config(load_config(path), tmp_path / "run", 1)
    assert grpo.use_vllm and grpo.vllm_mode == "server"
    assert grpo.vllm_server_base_url == "http://127.0.0.1:8802" and grpo.max_steps == 1


def test_trl_server_command_is_what_trl_vllm_serve_accepts(ctx):
    from trl.scripts.vllm_serve import make_parser  # TRL's own parser of `trl vllm-serve`

    argv = checks.trl_server_argv(ctx, 8802)
    assert Path(argv[0]).name == "trl" and argv[1] == "vllm-serve"
    (args,) = make_parser().parse_args_and_config(argv[2:])
    assert args.model == str(ctx.model_dir) and args.port == 8802 and args.host == "127.0.0.1"
    assert args.gpu_memory_utilization == 0.3 and args.max_model_len == 2048
    assert args.enforce_eager is True


def test_trl_verdict_needs_every_step_with_finite_loss_grad_norm_and_version():
    row = {"time_step_s": 12.5, "loss": 0.01, "grad_norm": 0.4, "success_rate": 0.25,
           "weight_version": 1}  # fmt: skip
    ok, figures, _ = checks.trl_verdict([row], 1)
    assert ok and figures["loss"] == 0.01 and figures["step_s"] == 12.5
    assert checks.trl_verdict([], 1)[0] is False
    ok, _, detail = checks.trl_verdict([{**row, "grad_norm": float("nan")}], 1)
    assert not ok and "grad_norm" in detail
    ok, _, detail = checks.trl_verdict([{k: v for k, v in row.items() if k != "weight_version"}], 1)
    assert not ok and "weight_version" in detail


def test_metrics_jsonl_is_read_line_by_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n\n" + json.dumps({"step": 1}) + "\n")
    assert checks.read_metrics(path) == [{"step": 0, "loss": 1.0}, {"step": 1}]
    assert checks.read_metrics(tmp_path / "missing.jsonl") == []


def test_trainer_and_server_get_separate_gpus_when_there_are_two(ctx):
    assert checks._devices(ctx) == ({}, {})
    ctx.gpu_count = 2
    assert checks._devices(ctx) == ({"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_VISIBLE_DEVICES": "0"})


# verl-grpo-step -----------------------------------------------------------------------------


def test_verl_step_command_uses_the_example_with_the_shared_overrides(ctx):
    prepare, step = checks.verl_argvs(ctx)
    assert prepare[-4:] == ["--synthetic", "256", "--out", str(ctx.work / "verl-data")]
    assert step[1:4] == ["-m", "rollhub_verl.launch", str(checks.VERL_EXAMPLE)]
    assert "trainer.total_training_steps=1" in step
    assert f"data.train_files={ctx.work / 'verl-data' / 'train.parquet'}" in step
    assert not any(a.startswith("actor_rollout_ref.model.path=") for a in step)
    ctx.verl_model = "/models/qwen"
    assert "actor_rollout_ref.model.path=/models/qwen" in checks.verl_argvs(ctx)[1]


def test_verl_verdict_reads_the_figures_of_step_1():
    out = ("(TaskRunner pid=1) step:1 - actor/pg_loss:np.float64(0.02) - critic/score/mean:0.5"
           " - response_length/mean:100.0 - timing_s/step:40.0\n")  # fmt: skip
    ok, figures, _ = checks.verl_verdict(out)
    assert ok and figures == {"step_s": 40.0, "pg_loss": 0.02, "score_mean": 0.5,
                              "response_len_mean": 100.0}  # fmt: skip
    ok, _, detail = checks.verl_verdict("Traceback ...\n")
    assert not ok and "no console line for step 1" in detail


def test_plan_lists_each_checks_commands(ctx):
    gateway = "\n".join(checks.plan("gateway-vs-vllm", ctx))
    assert "prepare_model.py" in gateway and "vllm.entrypoints.openai.api_server" in gateway
    assert "gateway serve" in gateway
    trl = "\n".join(checks.plan("trl-grpo-vllm", ctx))
    assert "VLLM_SERVER_DEV_MODE=1" in trl and "vllm-serve" in trl and " run " in trl
    verl = "\n".join(checks.plan("verl-grpo-step", ctx))
    assert "prepare_data.py" in verl and "rollhub_verl.launch" in verl
    (ctx.model_dir).mkdir(parents=True)
    (ctx.model_dir / "config.json").write_text("{}")
    assert "prepare_model.py" not in "\n".join(checks.plan("gateway-vs-vllm", ctx))


def test_a_runner_that_raises_becomes_a_fail(ctx, monkeypatch):
    def boom(ctx, deadline):
        raise RuntimeError("vLLM exited with 1 before it was ready")

    monkeypatch.setitem(checks.RUNNERS, "gateway-vs-vllm", boom)
    result = checks.run_check("gateway-vs-vllm", ctx, time.monotonic() + 10)
    assert result.status == "fail" and "vLLM exited with 1" in result.detail


# processes ----------------------------------------------------------------------------------


def test_server_is_waited_for_and_its_process_group_stopped(tmp_path):
    port = free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = Server("http.server", argv, f"http://127.0.0.1:{port}/", tmp_path / "s.log",
                    cwd=tmp_path, start_timeout_s=30)  # fmt: skip
    with server:
        proc = server.proc
        assert proc is not None and proc.poll() is None
    assert proc.poll() is not None and server.proc is None


def test_a_server_that_exits_early_is_an_error_with_its_output(tmp_path):
    argv = [sys.executable, "-c", "print('no GPU here'); raise SystemExit(3)"]
    server = Server(
        "fake", argv, "http://127.0.0.1:9/health", tmp_path / "f.log", start_timeout_s=30
    )
    with pytest.raises(RuntimeError, match=r"fake exited with 3.*no GPU here"):
        server.start()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a killed process not yet reaped is a zombie


def test_run_logged_kills_the_whole_group_on_timeout(tmp_path):
    # the child starts a grandchild that a kill of the child alone would leave running
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    rc, out = run_logged([sys.executable, "-c", code], tmp_path / "r.log", 3.0)
    assert rc is None and "started" in out and time.monotonic() - t0 < 20
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_run_logged_returns_the_exit_code_and_output(tmp_path):
    rc, out = run_logged([sys.executable, "-c", "print('hi'); raise SystemExit(4)"],
                         tmp_path / "ok.log", 20)  # fmt: skip
    assert (rc, out.strip()) == (4, "hi")

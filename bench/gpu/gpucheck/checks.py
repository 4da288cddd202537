"""The three checks. Each has a plan (the commands it runs, for ``--dry-run``) and a runner
that returns a :class:`~gpucheck.report.Result`; a runner never outlives its time limit and
always stops the servers it started.

- ``gateway-vs-vllm``: a few greedy chat turns through ``rollhub gateway serve --engine
  vllm``; the ids and logprobs the gateway recorded for each session
  (``GET /sessions/{sid}/traces``) must equal what the same vLLM server returns for the
  recorded prompt ids on its own (``POST /v1/completions``).
- ``trl-grpo-vllm``: ``rollhub run`` of ``examples/math/train-trl.toml`` made small, TRL's
  vLLM server (``trl vllm-serve``) sampling behind the gateway, TRL syncing its weights.
- ``verl-grpo-step``: ``python -m rollhub_verl.launch examples/verl/rollhub.toml`` for one
  step on synthetic data; its metrics are read from verl's console lines.
"""

from __future__ import annotations

import json
import math
import secrets
import shlex
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucheck import verl_step
from gpucheck.procs import Server, http_json, run_logged
from gpucheck.report import Result

__all__ = [
    "LOGPROB_TOL",
    "PROMPTS",
    "Context",
    "compare_tokens",
    "derive_trl_config",
    "plan",
    "run_check",
    "to_toml",
]

ROOT = Path(__file__).resolve().parents[3]
SMOLLM2 = "smollm2-135m-instruct"
SERVED = "rollhub-check"
PROMPTS = (
    "What is 17 * 23? Answer with the number only.",
    "Name three primary colours.",
    "Write one sentence about rain.",
    "Explain in one sentence what a hash table is.",
)
MAX_TOKENS = 48
LOGPROB_TOL = 1e-5


@dataclass
class Context:
    """Where things are: the check environment, the model, ports, the output folder."""

    venv: Path
    work: Path
    model: str = SMOLLM2
    verl_model: str | None = None
    port: int = 8800
    gpu_count: int = 1
    one_gpu_trl: bool = False
    _model_dir: Path | None = field(default=None, repr=False)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    @property
    def model_dir(self) -> Path:
        """Where the model is saved as a plain Hugging Face directory (served by vLLM)."""
        if Path(self.model).expanduser().is_dir():
            return Path(self.model).expanduser().resolve()
        return self.work.parent / "models" / self.model.replace("/", "--")

    def prepare_model_argv(self) -> list[str]:
        return [self.python, str(ROOT / "bench" / "gpu" / "prepare_model.py"), self.model,
                str(self.model_dir)]  # fmt: skip

    def ensure_model(self, timeout_s: float) -> Path:
        """Save the model to :attr:`model_dir` once (later runs reuse it)."""
        path = self.model_dir
        if (path / "config.json").is_file():
            return path
        code, out = run_logged(self.prepare_model_argv(), self.work / "prepare-model.log",
                               timeout_s, cwd=ROOT)  # fmt: skip
        if code != 0 or not (path / "config.json").is_file():
            raise RuntimeError(f"saving {self.model} to {path} failed (exit {code}): {out[-1500:]}")
        return path


# gateway-vs-vllm ----------------------------------------------------------------------------


def vllm_argv(ctx: Context, port: int) -> list[str]:
    """vLLM's OpenAI server on 127.0.0.1; no prefix caching, so both paths compute alike."""
    return [
        ctx.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(ctx.model_dir),
        "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "bfloat16", "--gpu-memory-utilization", "0.25", "--max-model-len", "2048",
        "--no-enable-prefix-caching", "--enforce-eager",
    ]  # fmt: skip


def gateway_argv(ctx: Context, port: int, vllm_port: int, token: str) -> list[str]:
    return [
        ctx.bin("rollhub"), "gateway", "serve", "--model", str(ctx.model_dir),
        "--engine", "vllm", "--engine-option", f"base_url=http://127.0.0.1:{vllm_port}",
        "--engine-option", f"model={SERVED}", "--host", "127.0.0.1", "--port", str(port),
        "--admin-token", token,
    ]  # fmt: skip


def compare_tokens(
    pairs: list[tuple[list[int], list[float], list[int], list[float]]],
) -> dict[str, Any]:
    """Figures of ``(gateway ids, gateway logprobs, direct ids, direct logprobs)`` per prompt:
    ``tokens`` compared, ``id_mismatches`` (differing positions plus any length difference),
    ``max_abs_dlogprob`` over the positions whose ids agree (None if there are none)."""
    tokens = mismatches = 0
    worst: float | None = None
    for g_ids, g_lps, d_ids, d_lps in pairs:
        n = min(len(g_ids), len(d_ids))
        tokens += n
        mismatches += abs(len(g_ids) - len(d_ids))
        for i in range(n):
            if g_ids[i] != d_ids[i]:
                mismatches += 1
                continue
            diff = abs(float(g_lps[i]) - float(d_lps[i]))
            worst = diff if worst is None or diff > worst else worst
    return {"prompts": len(pairs), "tokens": tokens, "id_mismatches": mismatches,
            "max_abs_dlogprob": worst}  # fmt: skip


def _gateway_turn(gw: str, admin: str, vllm: str, index: int, prompt: str) -> tuple:
    sid = f"gpu-check-{index}"
    opened = http_json("POST", f"{gw}/sessions",
                       {"session_id": sid, "policy": {"temperature": 0.0, "max_tokens": MAX_TOKENS}},
                       token=admin)  # fmt: skip
    http_json("POST", f"{gw}/v1/chat/completions",
              {"model": SERVED, "messages": [{"role": "user", "content": prompt}],
               "temperature": 0.0, "max_tokens": MAX_TOKENS}, token=opened["api_key"])  # fmt: skip
    traces = http_json("GET", f"{gw}/sessions/{sid}/traces", token=admin)["traces"]
    http_json("POST", f"{gw}/sessions/{sid}/finish", token=admin)
    if len(traces) != 1:
        raise RuntimeError(f"session {sid}: {len(traces)} trace records, expected 1")
    rec = traces[0]
    sampled = [i for i, m in enumerate(rec["response_mask"]) if m]
    g_ids = [rec["response_ids"][i] for i in sampled]
    g_lps = [rec["response_logprobs"][i] for i in sampled]
    direct = http_json("POST", f"{vllm}/v1/completions", {
        "model": SERVED, "prompt": rec["prompt_ids"], "max_tokens": MAX_TOKENS,
        "temperature": 0.0, "logprobs": 1, "return_token_ids": True,
        "skip_special_tokens": False, "include_stop_str_in_output": True,
    })  # fmt: skip
    choice = direct["choices"][0]
    return g_ids, g_lps, list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])


def run_gateway_vs_vllm(ctx: Context, deadline: float) -> Result:
    ctx.ensure_model(deadline - time.monotonic())
    vllm_port, gw_port, token = ctx.port, ctx.port + 1, secrets.token_hex(16)
    vllm = f"http://127.0.0.1:{vllm_port}"
    gw = f"http://127.0.0.1:{gw_port}"
    left = deadline - time.monotonic()
    with Server("vLLM", vllm_argv(ctx, vllm_port), f"{vllm}/health", ctx.work / "vllm.log",
                start_timeout_s=left), \
         Server("gateway", gateway_argv(ctx, gw_port, vllm_port, token), f"{gw}/healthz",
                ctx.work / "gateway.log", start_timeout_s=max(1.0, deadline - time.monotonic())):  # fmt: skip
        pairs = [_gateway_turn(gw, token, vllm, i, p) for i, p in enumerate(PROMPTS)]
    figures = compare_tokens(pairs)
    worst = figures["max_abs_dlogprob"]
    ok = figures["id_mismatches"] == 0 and figures["tokens"] > 0 and (worst or 0.0) <= LOGPROB_TOL
    detail = (f"ids equal, logprobs within {LOGPROB_TOL:g}" if ok else
              f"{figures['id_mismatches']} id mismatches, max |Δlogprob| {worst}")  # fmt: skip
    return Result("gateway-vs-vllm", "pass" if ok else "fail", figures=figures, detail=detail)


# trl-grpo-vllm ------------------------------------------------------------------------------

TRL_EXAMPLE = ROOT / "examples" / "math" / "train-trl.toml"


def _abs(base: Path, value: str) -> str:
    return str((base / value).resolve())


def derive_trl_config(
    source: dict[str, Any], base: Path, work: Path, model_dir: Path, vllm_url: str,
    *, steps: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """``train-trl.toml`` (parsed, its folder ``base``) made into one small GPU step: TRL's
    vLLM server samples behind the gateway (engine ``vllm``) and TRL syncs its weights."""
    cfg = json.loads(json.dumps(source))  # a deep copy
    exp = cfg["experiment"]
    exp.update(dataset=_abs(base, exp["dataset"]), output_dir=str(work), n_samples=4,
               concurrency=16)  # fmt: skip
    cfg.pop("eval", None)  # held-out evaluation is not what this checks
    app_file, sep, attr = cfg["runtime"]["app"].partition(":")
    cfg["runtime"]["app"] = _abs(base, app_file) + sep + attr
    cfg["store"]["url"] = f"file://{work / 'results'}"
    ts = cfg["token_source"]
    ts["model"] = str(model_dir)
    if "chat_template" in ts:
        ts["chat_template"] = _abs(base, ts["chat_template"])
    ts["engine"] = {"name": "vllm", "options": {"base_url": vllm_url, "model": str(model_dir)}}
    trainer = cfg["trainer"]
    trainer["model"] = str(model_dir)
    trainer["use_vllm"] = True
    trainer.setdefault("args", {}).update(vllm_mode="server", vllm_server_base_url=vllm_url)
    cfg["training"].update(steps=steps, batch_groups=2, checkpoint_every=0)
    return cfg


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    raise TypeError(f"no TOML for {type(value).__name__}")


def to_toml(data: dict[str, Any]) -> str:
    """TOML text of a config of tables (a table's tables nested as inline tables)."""
    lines = []
    for name, table in data.items():
        if not isinstance(table, dict):
            raise TypeError(f"top-level {name!r} must be a table")
        lines.append(f"[{name}]")
        lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()]
        lines.append("")
    return "\n".join(lines)


def trl_server_argv(ctx: Context, port: int) -> list[str]:
    """TRL's vLLM server (``trl vllm-serve``: vLLM's OpenAI server with weight transfer)."""
    return [
        ctx.bin("trl"), "vllm-serve", "--model", str(ctx.model_dir), "--host", "127.0.0.1",
        "--port", str(port), "--gpu_memory_utilization", "0.3", "--max_model_len", "2048",
        "--dtype", "bfloat16", "--enforce_eager", "true",
    ]  # fmt: skip


def _devices(ctx: Context) -> tuple[dict[str, str], dict[str, str]]:
    """``CUDA_VISIBLE_DEVICES`` of the vLLM server and of the trainer."""
    if ctx.gpu_count >= 2:
        return {"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_VISIBLE_DEVICES": "0"}
    return {}, {}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trl_verdict(rows: list[dict[str, Any]], steps: int) -> tuple[bool, dict[str, Any], str]:
    """``(passed, figures, detail)`` of a run's ``metrics.jsonl`` rows."""
    if len(rows) < steps:
        return False, {"steps": len(rows)}, f"metrics.jsonl has {len(rows)} steps, expected {steps}"
    last = rows[-1]
    figures = {"steps": len(rows), "step_s": last.get("time_step_s"), "loss": last.get("loss"),
               "grad_norm": last.get("grad_norm"), "success_rate": last.get("success_rate"),
               "weight_version": last.get("weight_version")}  # fmt: skip
    bad = [k for k in ("loss", "grad_norm", "weight_version")
           if not isinstance(last.get(k), int | float) or not math.isfinite(last[k])]  # fmt: skip
    if bad:
        return False, figures, "not finite or missing: " + ", ".join(bad)
    return True, figures, f"{len(rows)} step(s) recorded"


def run_trl_grpo(ctx: Context, deadline: float, steps: int = 1) -> Result:
    model_dir = ctx.ensure_model(deadline - time.monotonic())
    port = ctx.port + 2
    url = f"http://127.0.0.1:{port}"
    config = ctx.work / "train-trl-gpu.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    source = tomllib.loads(TRL_EXAMPLE.read_text())
    config.write_text(to_toml(derive_trl_config(source, TRL_EXAMPLE.parent, ctx.work, model_dir,
                                                url, steps=steps)))  # fmt: skip
    run_dir = ctx.work / "trl-run"
    server_env, trainer_env = _devices(ctx)
    with Server("trl vllm-serve", trl_server_argv(ctx, port), f"{url}/health",
                ctx.work / "trl-vllm.log", env={"VLLM_SERVER_DEV_MODE": "1", **server_env},
                start_timeout_s=deadline - time.monotonic()):  # fmt: skip
        code, out = run_logged(
            [ctx.bin("rollhub"), "run", str(config), "--run-dir", str(run_dir), "--no-progress"],
            ctx.work / "trl-run.log", deadline - time.monotonic(), env=trainer_env, cwd=ROOT,
        )  # fmt: skip
    if code != 0:
        why = "timed out" if code is None else f"exit {code}"
        if "Duplicate GPU detected" in out:
            why += " (NCCL: trainer and vLLM on one device)"
        return Result("trl-grpo-vllm", "fail", detail=f"rollhub run {why}: {out[-600:]}")
    ok, figures, detail = trl_verdict(read_metrics(run_dir / "metrics.jsonl"), steps)
    return Result("trl-grpo-vllm", "pass" if ok else "fail", figures=figures, detail=detail)


# verl-grpo-step -----------------------------------------------------------------------------

VERL_EXAMPLE = ROOT / "examples" / "verl" / "rollhub.toml"


def verl_argvs(ctx: Context) -> tuple[list[str], list[str]]:
    """``(prepare the data, one step)``."""
    data = ctx.work / "verl-data"
    prepare = [ctx.python, str(ROOT / "examples" / "verl" / "prepare_data.py"), "--synthetic",
               "256", "--out", str(data)]  # fmt: skip
    overrides = [*verl_step.STEP_OVERRIDES, f"data.train_files={data / 'train.parquet'}",
                 f"data.val_files={data / 'test.parquet'}"]  # fmt: skip
    if ctx.verl_model:
        overrides.append(f"actor_rollout_ref.model.path={ctx.verl_model}")
    step = [ctx.python, "-m", "rollhub_verl.launch", str(VERL_EXAMPLE), *overrides,
            "--run-dir", str(ctx.work / "verl-run")]  # fmt: skip
    return prepare, step


def verl_verdict(output: str) -> tuple[bool, dict[str, Any], str]:
    steps = verl_step.parse_steps(output)
    metrics = steps.get(1, {})
    figures = {"step_s": metrics.get("timing_s/step"), "pg_loss": metrics.get("actor/pg_loss"),
               "score_mean": metrics.get("critic/score/mean"),
               "response_len_mean": metrics.get("response_length/mean")}  # fmt: skip
    problems = verl_step.step_problems(steps, 1)
    return not problems, figures, "; ".join(problems) or "step 1 logged, finite"


def run_verl_step(ctx: Context, deadline: float) -> Result:
    prepare, step = verl_argvs(ctx)
    code, out = run_logged(
        prepare, ctx.work / "verl-data.log", deadline - time.monotonic(), cwd=ROOT
    )
    if code != 0:
        return Result("verl-grpo-step", "fail", detail=f"prepare_data.py exit {code}: {out[-600:]}")
    code, out = run_logged(step, ctx.work / "verl-step.log", deadline - time.monotonic(),
                           env={"HYDRA_FULL_ERROR": "1"}, cwd=ROOT)  # fmt: skip
    ok, figures, detail = verl_verdict(out)
    if code != 0:
        why = "timed out" if code is None else f"exit {code}"
        return Result("verl-grpo-step", "fail", figures=figures, detail=f"{why}: {out[-600:]}")
    return Result("verl-grpo-step", "pass" if ok else "fail", figures=figures, detail=detail)


# plan and dispatch --------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Context, float], Result]] = {
    "gateway-vs-vllm": run_gateway_vs_vllm,
    "trl-grpo-vllm": run_trl_grpo,
    "verl-grpo-step": run_verl_step,
}


def plan(name: str, ctx: Context) -> list[str]:
    """The commands check ``name`` runs, as shell lines (servers marked ``&``)."""
    join = shlex.join
    model = [] if (ctx.model_dir / "config.json").is_file() else [join(ctx.prepare_model_argv())]
    if name == "gateway-vs-vllm":
        return [*model, join(vllm_argv(ctx, ctx.port)) + " &",
                join(gateway_argv(ctx, ctx.port + 1, ctx.port, "ADMIN_TOKEN")) + " &",
                f"# {len(PROMPTS)} greedy chat turns through the gateway, then the recorded "
                "prompt ids straight to vLLM's /v1/completions"]  # fmt: skip
    if name == "trl-grpo-vllm":
        config = ctx.work / "train-trl-gpu.toml"
        return [*model, "VLLM_SERVER_DEV_MODE=1 " + join(trl_server_argv(ctx, ctx.port + 2)) + " &",
                f"# {config}: {TRL_EXAMPLE.relative_to(ROOT)} with use_vllm, vllm_mode=server, "
                "engine vllm, 1 step",
                join([ctx.bin("rollhub"), "run", str(config), "--run-dir",
                      str(ctx.work / "trl-run"), "--no-progress"])]  # fmt: skip
    if name == "verl-grpo-step":
        return [join(argv) for argv in verl_argvs(ctx)]
    raise KeyError(name)


def run_check(name: str, ctx: Context, deadline: float) -> Result:
    """Run check ``name`` until ``deadline`` (``time.monotonic()``); errors become a fail."""
    t0 = time.monotonic()
    try:
        result = RUNNERS[name](ctx, deadline)
    except Exception as exc:  # a server that did not start, an HTTP error, ...
        result = Result(name, "fail", detail=f"{type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - t0
    return result

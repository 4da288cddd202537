"""The embedded engine against the machine's floor and its peers, in one run.

    .venv/bin/python bench/bench_engine_floor.py --sessions 1 8 32 --threads 2 \\
        --build-llama-server ~/.cache/rollhub/llama-server

On the calculator workload (:mod:`engine_floor_systems`: ~300-token prompts shared by
groups of 8 sessions, 2 turns, exactly ``--new`` sampled tokens a turn) at each session
count, one after another, each in a fresh process:

- ``matmul``: the decode step's matrix shapes with weights streamed from memory, fp32 and
  bf16, and the compute ceiling that implies for this model (2 FLOPs per parameter per
  token, attention over the workload's mean context included);
- ``bare``: the engine's own forward pass in a plain loop over a static cache, rows in
  lockstep, no scheduling and no prefix sharing (its decode-only rate is the floor);
- ``hf_generate``: Hugging Face ``generate`` on the whole batch each turn (TRL's CPU path);
- ``llama_server``: llama.cpp's server with one slot per session, on the same GGUF file,
  built from the ``llama-cpp-python`` source package (``--build-llama-server DIR``, timed)
  or given (``--llama-server PATH``);
- ``engine`` / ``gateway``: rollhub's engine fed token ids directly, and behind the gateway
  with the sessions' OpenAI clients in another process;
- ``engine_before`` / ``gateway_before``: the same, with the engine of ``--baseline`` (a
  git revision; its ``gateway/rollhub_gateway`` is exported and put first on the path).

Prints one JSON row per measurement, then the tables for docs/benchmarks/engines.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = Path(__file__).with_name("engine_floor_systems.py")
#: the engine before the pre-allocated cache (the parent of its first commit)
BASELINE = "2b90d96"
LLAMA_CPP_PYTHON = "0.3.36"
#: parameters a decoded token multiplies by (SmolLM2-135M: 30 layers of 3.54 M, the head)
PARAMS = 30 * 3_538_944 + 49_152 * 576
ATTENTION_PER_CTX = 4 * 30 * 9 * 64  # FLOPs per token per position of context


def build_llama_server(where: Path) -> tuple[str, float]:
    """llama.cpp's server from the llama-cpp-python source package (cached in ``where``)."""
    binary = where / "build" / "bin" / "llama-server"
    if binary.exists():
        return str(binary), 0.0
    where.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:",
                    "--no-deps", f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(where)],
                   check=True)
    with tarfile.open(next(where.glob("llama_cpp_python-*.tar.gz"))) as sdist:
        sdist.extractall(where, filter="data")
    source = next(where.glob("llama_cpp_python-*/vendor/llama.cpp"))
    subprocess.run(["cmake", "-S", str(source), "-B", str(where / "build"), "-G", "Ninja",
                    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_SERVER=ON",
                    "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
                    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF",
                    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                    "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=ON", *no_amx_flags()], check=True)
    subprocess.run(["cmake", "--build", str(where / "build"), "--target", "llama-server",
                    "-j", str(os.cpu_count() or 2)], check=True)
    return str(binary), time.perf_counter() - start


def no_amx_flags() -> list[str]:
    """Compiler flags that keep ggml's AMX kernels out of a native x86 build.

    A CPU may list AMX while the kernel has not granted the process its tile state (a
    virtual machine often does not); ggml's AMX matrix kernels then stop the server with
    SIGILL at the first multiplication (``tilezero``, seen on a 2-core Xeon VM). The AVX-512
    paths stay.
    """
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    off = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    return [f"-DCMAKE_C_FLAGS={off}", f"-DCMAKE_CXX_FLAGS={off}"]


def export_baseline(revision: str, into: Path) -> Path:
    """``gateway/rollhub_gateway`` of ``revision``, for the ``*_before`` systems."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision,
                              "gateway/rollhub_gateway"], check=True, capture_output=True)
    tar = into / "baseline.tar"
    tar.write_bytes(archive.stdout)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    return into / "gateway"


def measure(
    kind: str, spec: dict[str, Any], path: Path | None = None, revision: str = ""
) -> dict[str, Any]:
    """Run one system in its own process; its RESULT row plus the load around it. The
    engine's source is named relative to the repository (``revision:`` first for the
    baseline exported to ``path``)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, str(SYSTEMS), kind, json.dumps(spec)], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    rows = [line[7:] for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not rows:
        print(done.stdout[-2000:], done.stderr[-4000:], file=sys.stderr)
        return {"system": spec.get("label", kind), "error": done.returncode}
    row: dict[str, Any] = json.loads(rows[-1])
    if done.returncode:  # measured, then failed on the way out (the old engine's thread
        # at interpreter exit: "terminate called without an active exception")
        row["exit_code"] = done.returncode
        print(done.stderr[-1000:], file=sys.stderr)
    row["load_before"], row["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
    if "source" in row:
        tree = ROOT if path is None else path.parent
        row["source"] = f"{revision}:" * bool(revision) + os.path.relpath(row["source"], tree)
    if "tokens" in row:
        row["tokens_per_s"] = round(row["tokens"] / row["wall_s"], 1)
    if row.get("cpu_s"):
        row["tokens_per_cpu_s"] = round(row["tokens"] / row["cpu_s"], 1)
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new", type=int, default=40, help="sampled tokens per turn")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of 'before'")
    parser.add_argument("--llama-server", help="a built llama-server binary")
    parser.add_argument("--build-llama-server", type=Path, help="build it here (cached)")
    parser.add_argument("--skip", nargs="*", default=[], help="systems to leave out")
    parser.add_argument("--out", type=Path, help="write every row here as JSON")
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    binary, build_s = args.llama_server, None
    if binary is None and args.build_llama_server and "llama_server" not in args.skip:
        binary, build_s = build_llama_server(args.build_llama_server.expanduser())
        built = {"seconds": round(build_s, 1)} if build_s else {"cached": True}
        rows.append({"system": "llama_server_build", **built})
        print(json.dumps(rows[-1]), flush=True)
    common = {"threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        before = export_baseline(args.baseline, Path(tmp))
        if "matmul" not in args.skip:
            rows.append(measure("matmul", {"sessions": args.sessions, **common}))
        for batch in args.sessions:
            spec = {"batch": batch, "new": args.new, **common}
            plan: list[tuple[str, dict[str, Any], Path | None]] = [
                ("bare", spec, None),
                ("engine", {**spec, "label": "engine"}, None),
                ("gateway", {**spec, "label": "gateway"}, None),
                ("engine", {**spec, "label": "engine_before"}, before),
                ("gateway", {**spec, "label": "gateway_before"}, before),
                ("hf_generate", spec, None),
            ]
            if binary:
                plan.append(("llama_server", {**spec, "binary": binary}, None))
            for kind, s, path in plan:
                if s.get("label", kind) not in args.skip:
                    rows.append(measure(kind, s, path, args.baseline if path else ""))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    print_tables(rows, args.sessions)


def print_tables(rows: list[dict[str, Any]], sessions: list[int]) -> None:
    """The markdown tables of docs/benchmarks/engines.md: sampled tokens per second of
    wall time, and per CPU-second of the system's own processes over the same window
    (what it would do with the cores to itself: the figure that survives a shared
    machine)."""
    by = {(r["system"], r.get("sessions")): r for r in rows if "error" not in r}
    mm = by.get(("matmul", None), {}).get("gflops", {})
    names = ["engine", "gateway", "engine_before", "gateway_before", "bare", "hf_generate",
             "llama_server"]
    for metric, floor, title in (
        ("tokens_per_s", "decode_tokens_per_s", "sampled tokens / s (wall)"),
        ("tokens_per_cpu_s", "decode_tokens_per_cpu_s", "sampled tokens / CPU-second"),
    ):
        print(f"\n| {title} | " + " | ".join(f"{b} sessions" for b in sessions) + " |")
        print("| --- |" + " ---: |" * len(sessions))
        for name in names:
            cells = [str(by[(name, b)].get(metric, "—")) if (name, b) in by else "—"
                     for b in sessions]
            print(f"| {name} | " + " | ".join(cells) + " |")
        cells = [f"{by[('bare', b)][floor]:.1f}" if ("bare", b) in by else "—"
                 for b in sessions]
        print("| bare, decoding steps only | " + " | ".join(cells) + " |")
        for b in sessions:
            new = by.get(("gateway", b))
            if not new or metric not in new:
                continue
            ratios = []
            for other, label in (("gateway_before", "today's engine through the gateway"),
                                 ("engine_before", "today's engine direct"),
                                 ("hf_generate", "HF generate"),
                                 ("llama_server", "llama.cpp's server")):
                r = by.get((other, b))
                if r and r.get(metric):
                    ratios.append(f"{new[metric] / r[metric]:.2f}x {label}")
            bare = by.get(("bare", b))
            if bare:
                ratios.append(f"{new[metric] / bare[floor]:.0%} of the bare loop's decoding")
            print(f"\n{b} sessions, rollhub through the gateway: " + "; ".join(ratios))
    print("\n| compute ceiling (tokens / s) | " + " | ".join(f"{b}" for b in sessions) + " |")
    print("| --- |" + " ---: |" * len(sessions))
    for dtype in ("float32", "bfloat16"):
        cells = []
        for b in sessions:
            rate = mm.get(f"{dtype}_b{b}")
            flops = 2 * PARAMS + ATTENTION_PER_CTX * 380
            cells.append(f"{rate * 1e9 / flops:.0f} ({rate:.0f} GFLOP/s)" if rate else "—")
        print(f"| {dtype} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""Serving two policies on one CPU: LoRA adapters over one base against model copies.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_policy_serving.py --rows 8 --tokens 32

Two policies, ``--rows`` rows each; every row a ``--prompt``-token prompt continued by
exactly ``--tokens`` greedy tokens. Layouts:

- ``one``: a single model decoding both policies' rows as one batch: the floor (what
  serving one policy to every row costs);
- ``copies``: two whole models, each its own batch, one decoding step of each in turn;
- ``shared``: two models that share their frozen parameters (embeddings, lower decoder
  layers) and own their top ``--own-layers`` layers and final norm (what the ``torch``
  trainer trains), each its own batch;
- ``lora-mixed``: one base with two LoRA adapters (``peft``, rank ``--rank`` on every
  linear layer of every decoder layer), rows of both adapters in one batch
  (``adapter_names``: peft's mixed-adapter batches);
- ``lora-split``: the same base and adapters, each adapter's rows their own batch
  (``set_adapter`` between steps).

Speed: every layout is built in one process and timed in turn, repeat after repeat (the
order shuffled each repeat), so the machine's load falls on all of them alike; the
median decoding time of ``--repeats`` repeats is reported (prefill excluded), with each
layout's ratio to ``one``, both as tokens per second of wall time and per CPU-second of the
process (the comparable figure on a shared machine, where wall time mostly measures the
share of a core the process got). Then the gateway's own path: two ``transformers`` engines (one
per policy, each over its own model) sampling at once against one engine taking all rows,
timed the same way (prefill included).

Memory: each layout is built again in a fresh process, which reports its resident set
after building (``rss_gb``), its peak (``peak_gb``) and the bytes of its distinct parameter
tensors (``params_gb``).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

LAYOUTS = ("one", "copies", "shared", "lora-mixed", "lora-split")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e9


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _param_gb(*models: Any) -> float:
    seen: dict[int, int] = {}
    for m in models:
        for p in m.parameters():
            seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values()) / 1e9


def _prompts(rows: int, length: int, seed: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(100, 40000, (rows, length), generator=g)


def _base() -> Any:
    from rollhub_gateway.models import SMOLLM2, load_causal_lm

    model, _ = load_causal_lm(SMOLLM2)
    return model.eval().requires_grad_(False)


def _lora(model: Any, rank: int) -> Any:
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=TARGETS, init_lora_weights=False
    )  # nonzero B: the adapters change outputs
    peft_model = get_peft_model(model, cfg, adapter_name="a")
    peft_model.add_adapter("b", cfg)
    return peft_model.eval()


def _shared_copy(model: Any, own_layers: int) -> Any:
    """A copy of ``model`` owning its top ``own_layers`` decoder layers and the final norm,
    sharing every other parameter."""
    n = len(model.get_decoder().layers)
    own = (*(f"model.layers.{i}." for i in range(n - own_layers, n)), "model.norm")
    shared = {
        id(p): p
        for name, p in model.named_parameters(remove_duplicate=False)
        if not name.startswith(own)
    }
    return copy.deepcopy(model, memo=dict(shared))


class _Adapter:
    """One adapter of a peft model, made the active one before each call."""

    def __init__(self, peft_model: Any, name: str) -> None:
        self.model, self.name = peft_model, name

    def __call__(self, **kw: Any) -> Any:
        self.model.base_model.set_adapter(self.name)
        return self.model(**kw)


def build(
    layout: str, args: argparse.Namespace, base: Any
) -> tuple[list[Any], list[dict[str, Any]], list[Any]]:
    """``(models, kwargs, batches)`` of one layout; ``base`` is used and may be changed
    (peft wraps it)."""
    import torch

    a, b = _prompts(args.rows, args.prompt, 1), _prompts(args.rows, args.prompt, 2)
    if layout == "one":
        return [base], [{}], [torch.cat([a, b])]
    if layout == "copies":
        return [base, copy.deepcopy(base)], [{}, {}], [a, b]
    if layout == "shared":
        return [base, _shared_copy(base, args.own_layers)], [{}, {}], [a, b]
    if layout == "lora-mixed":
        names = ["a"] * args.rows + ["b"] * args.rows
        return [_lora(base, args.rank)], [{"adapter_names": names}], [torch.cat([a, b])]
    if layout == "lora-split":
        peft_model = _lora(base, args.rank)
        return [_Adapter(peft_model, "a"), _Adapter(peft_model, "b")], [{}, {}], [a, b]
    raise SystemExit(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")


def decode(
    models: list[Any], kwargs: list[dict[str, Any]], batches: list[Any], tokens: int
) -> tuple[float, float]:
    """Prefill each batch on its model, then ``tokens`` greedy steps, one step of each model
    in turn; ``(wall seconds, process CPU seconds)`` of the decoding steps."""
    import torch
    from transformers import DynamicCache

    with torch.inference_mode():
        states = []
        for model, kw, ids in zip(models, kwargs, batches, strict=True):
            cache = DynamicCache()
            out = model(
                input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1, **kw
            )
            states.append([out.logits[:, -1].argmax(-1, keepdim=True), cache])
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(tokens):
            for model, kw, state in zip(models, kwargs, states, strict=True):
                out = model(
                    input_ids=state[0],
                    past_key_values=state[1],
                    use_cache=True,
                    logits_to_keep=1,
                    **kw,
                )
                state[0] = out.logits[:, -1].argmax(-1, keepdim=True)
        return time.perf_counter() - t0, time.process_time() - c0


def _figures(
    seconds: dict[str, list[float]], cpu: dict[str, list[float]], tokens: int, time_key: str
) -> dict[str, dict[str, Any]]:
    """Each setup's median time (under ``time_key``), tokens per second and per CPU-second."""
    return {
        k: {
            time_key: round(statistics.median(v), 3),
            "tokens_per_s": round(tokens / statistics.median(v), 2),
            "tokens_per_cpu_s": round(tokens / statistics.median(cpu[k]), 2),
            "repeats_s": [round(s, 3) for s in v],
            "repeats_cpu_s": [round(s, 3) for s in cpu[k]],
        }
        for k, v in seconds.items()
    }


def speed(args: argparse.Namespace) -> dict[str, Any]:
    """Every layout timed in one process, interleaved."""
    import torch

    torch.set_num_threads(args.threads)
    built = {}
    plain = None  # the layouts without adapters share one unwrapped base
    for layout in args.layouts:
        if layout.startswith("lora"):
            base = _base()  # peft wraps the model it is given
        else:
            base = plain = plain if plain is not None else _base()
        built[layout] = build(layout, args, base)
        decode(*built[layout], 2)  # warm-up: first-call setup
    seconds: dict[str, list[float]] = {k: [] for k in built}
    cpu: dict[str, list[float]] = {k: [] for k in built}
    order = list(built)
    rng = random.Random(0)
    for r in range(args.repeats):
        rng.shuffle(order)
        for layout in order:
            wall, used = decode(*built[layout], args.tokens)
            seconds[layout].append(wall)
            cpu[layout].append(used)
            print(
                f"repeat {r + 1}: {layout} {wall:.2f} s, {used:.2f} CPU-s",
                file=sys.stderr,
                flush=True,
            )
    out = _figures(seconds, cpu, 2 * args.rows * args.tokens, "decode_s")
    if "one" in out:
        for v in out.values():
            v["vs_one"] = round(v["tokens_per_s"] / out["one"]["tokens_per_s"], 3)
            v["cpu_vs_one"] = round(v["tokens_per_cpu_s"] / out["one"]["tokens_per_cpu_s"], 3)
    return out


def memory(layout: str, args: argparse.Namespace) -> dict[str, Any]:
    """One layout's memory (run in a fresh process)."""
    import torch

    torch.set_num_threads(args.threads)
    models, kwargs, batches = build(layout, args, _base())
    rss = _rss_gb()
    decode(models, kwargs, batches, 2)  # caches and activations of a short run
    params = _param_gb(*[getattr(m, "model", m) for m in models])
    return {"rss_gb": round(rss, 3), "peak_gb": round(_peak_gb(), 3), "params_gb": round(params, 3)}


def engines(args: argparse.Namespace) -> dict[str, Any]:
    """Two ``transformers`` engines at once (one per policy) against one engine with every
    row, interleaved repeats; prefill included."""
    import torch
    from rollhub.sampling import SamplingParams
    from rollhub_gateway.engines.transformers_engine import TransformersBackend, TransformersOptions

    torch.set_num_threads(args.threads)

    async def go() -> dict[str, Any]:
        def engine(rows: int) -> TransformersBackend:
            return TransformersBackend(
                TransformersOptions(
                    max_batch_size=rows, threads=args.threads, prefix_cache_tokens=0
                )
            )

        base = _base()
        one, pair = engine(2 * args.rows), [engine(args.rows), engine(args.rows)]
        one.update_policy(base, 0)
        pair[0].update_policy(base, 0)
        pair[1].update_policy(copy.deepcopy(base), 0)
        for e in (one, *pair):
            await e.start()
        prompts = [_prompts(args.rows, args.prompt, s).tolist() for s in (1, 2)]
        sp = SamplingParams(max_tokens=args.tokens, temperature=0.0, extra={"ignore_eos": True})
        setups = {
            "one engine": [(one, p) for ps in prompts for p in ps],
            "two engines": [(e, p) for e, ps in zip(pair, prompts, strict=True) for p in ps],
        }
        for calls in setups.values():  # warm-up
            await asyncio.gather(
                *(e.generate(p, SamplingParams(max_tokens=2, temperature=0.0)) for e, p in calls)
            )
        seconds: dict[str, list[float]] = {k: [] for k in setups}
        cpu: dict[str, list[float]] = {k: [] for k in setups}
        order = list(setups)
        for r in range(args.repeats):
            for name in order if r % 2 == 0 else order[::-1]:
                t0, c0 = time.perf_counter(), time.process_time()
                await asyncio.gather(*(e.generate(p, sp) for e, p in setups[name]))
                seconds[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
                print(f"repeat {r + 1}: {name} {seconds[name][-1]:.2f} s", file=sys.stderr)
        for e in (one, *pair):
            await e.close()
        return _figures(seconds, cpu, 2 * args.rows * args.tokens, "wall_s")

    return asyncio.run(go())


def _child(what: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        what,
        f"--rows={args.rows}",
        f"--prompt={args.prompt}",
        f"--tokens={args.tokens}",
        f"--repeats={args.repeats}",
        f"--threads={args.threads}",
        f"--rank={args.rank}",
        f"--own-layers={args.own_layers}",
        f"--layouts={','.join(args.layouts)}",
    ]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)  # progress: stderr
    if out.returncode != 0:
        raise SystemExit(f"{what} failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="rows per policy")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per row")
    parser.add_argument("--tokens", type=int, default=32, help="decoded tokens per row")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--own-layers", type=int, default=8, help="'shared': layers each owns")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    args.layouts = args.layouts.split(",")
    if args.child == "speed":
        print(json.dumps(speed(args)))
        return
    if args.child == "engines":
        print(json.dumps(engines(args)))
        return
    if args.child:
        print(json.dumps(memory(args.child, args)))
        return
    speeds = _child("speed", args)
    print(json.dumps({"speed": speeds}), flush=True)
    mems = {layout: _child(layout, args) for layout in args.layouts}
    print(json.dumps({"memory": mems}), flush=True)
    eng = _child("engines", args)
    print(json.dumps({"engines": eng}), flush=True)
    print(
        f"\n{2 * args.rows} rows ({args.rows} per policy), {args.prompt}-token prompts, "
        f"{args.tokens} tokens each, {args.threads} threads, median of {args.repeats}"
    )
    print(
        "\n| layout | tokens/CPU-s | vs one model | tokens/s | vs one model | params GB "
        "| RSS GB | peak GB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for layout in args.layouts:
        s, m = speeds[layout], mems[layout]
        print(
            f"| {layout} | {s['tokens_per_cpu_s']} | {s.get('cpu_vs_one', '-')} | "
            f"{s['tokens_per_s']} | {s.get('vs_one', '-')} | {m['params_gb']} | "
            f"{m['rss_gb']} | {m['peak_gb']} |"
        )
    print("\n| engines (prefill included) | tokens/CPU-s | tokens/s | wall s |")
    print("| --- | --- | --- | --- |")
    for name, e in eng.items():
        print(f"| {name} | {e['tokens_per_cpu_s']} | {e['tokens_per_s']} | {e['wall_s']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "speed": speeds, "memory": mems, "engines": eng}, f, indent=1
            )


if __name__ == "__main__":
    main()

"""How far the engine's sampling distribution drifts from a float32 learner's, per precision.

    .venv/bin/python bench/bench_sampler_kl.py --seed 0 --out docs/benchmarks/sampler-kl.json
    .venv/bin/python bench/bench_sampler_kl.py --seed 1 --out docs/benchmarks/sampler-kl-seed1.json

On-policy training assumes the engine samples from the distribution the trainer scores.
The trainer computes in float32 (Hugging Face's forward); this bench samples calculator
turns (the main job's prompt, ``--problems`` problems x ``--samples`` samples, ``--new``
tokens each, temperature 0.7), scores every sampled position with the engine's own forward
pass (:class:`~rollhub_gateway.engines.decoder.Decoder`) under each precision and with the
learner, and reports, at the sampling temperature:

- the exact KL(sampler || learner) over the vocabulary per position: mean (with a 95%
  bootstrap interval over samples), 99th percentile, max; a precision is within the bound
  (1e-4) when the whole interval is;
- the largest difference of a sampled token's logprob between the two;
- the decode step's linear layers at batch 32 (the model's own weights, streamed from
  memory as in a step), timed against float32, and the share of that arithmetic done in
  bfloat16.

Precisions: float32; the model in bfloat16 (``dtype = "bfloat16"``); oneDNN's bfloat16
math for float32 products (inputs and weights rounded to bfloat16, products summed in
float32, results float32, the rest of the pass float32) on every linear layer or on a
subset; and weights rounded to bfloat16 with float32 arithmetic (the output layer, tied to
the embedding, kept), which separates the weights' rounding from the inputs'.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_floor_systems import TEMPERATURE, workload

BOUND = 1e-4
#: bf16-math variants: name -> which linear layers (by module name) take bfloat16 math
SUBSETS: dict[str, Callable[[str], bool]] = {
    "bf16 math, every linear layer": lambda name: True,
    "bf16 math, all but the output layer": lambda name: name != "lm_head",
    "bf16 math, attention projections": lambda name: "self_attn" in name,
    "bf16 math, MLP": lambda name: ".mlp." in name,
    "bf16 math, down projections": lambda name: "down_proj" in name,
}


def sequences(
    model: Any, problems: int, samples: int, new: int, seed: int
) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) of ``samples`` float32 samples of ``problems`` prompts."""
    import torch

    prompts, _, _ = workload(problems * 8)
    out = []
    torch.manual_seed(seed)
    with torch.inference_mode():
        for prompt in prompts[::8][:problems]:
            ids = torch.tensor([prompt] * samples)
            done = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                  temperature=TEMPERATURE, top_k=0, max_new_tokens=new)
            out += [(row.tolist(), len(prompt)) for row in done]
    return out


def sampler_logits(decoder: Any, seq: list[int], prompt_len: int) -> Any:
    """The engine's float32 logits at each sampled position of ``seq`` (one prefill)."""
    from rollhub_gateway.engines.decoder import Chunk, Pass
    from rollhub_gateway.engines.kv_store import SlotCache

    slots = SlotCache(decoder.shape, 1, len(seq), decoder.dtype)
    slots.reserve(len(seq), 0, 1)
    step = Pass(tokens=seq, positions=list(range(len(seq))), rows=0,
                chunks=[Chunk(0, len(seq), *slots.layers(0), 0)],
                sample=list(range(prompt_len - 1, len(seq) - 1)))
    return decoder.forward(step, slots)


@contextlib.contextmanager
def bf16_math(model: Any, pick: Callable[[str], bool]) -> Iterator[float]:
    """Linear layers named by ``pick`` computed with oneDNN's bfloat16 math; yields the
    share of a token's linear arithmetic they hold."""
    import torch
    import torch.nn.functional as F

    chosen = {id(m.weight): m.weight.numel() for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and pick(n)}
    total = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    backend = torch.backends.mkldnn.matmul
    plain = F.linear

    def linear(x: Any, weight: Any, bias: Any = None) -> Any:
        backend.fp32_precision = "bf16" if id(weight) in chosen else "ieee"
        try:
            return plain(x, weight, bias)
        finally:
            backend.fp32_precision = "ieee"

    F.linear = linear
    try:
        yield sum(chosen.values()) / total
    finally:
        F.linear = plain


def step_linears_s(model: Any, batch: int = 32) -> float:
    """CPU seconds of one decoding step's linear layers at ``batch`` rows (best of 4)."""
    import torch
    import torch.nn.functional as F

    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(batch, w.shape[1]).to(w.dtype) for w in weights}
    best = float("inf")
    with torch.inference_mode():
        for _ in range(4):
            start = time.process_time()
            for w in weights:
                F.linear(inputs[w.shape[1]], w)
            best = min(best, time.process_time() - start)
    return best


def compare(name: str, learner: list[Any], sampled: list[Any], logits: list[Any],
            seconds: float, base_s: float, share: float) -> dict[str, Any]:
    """One row: the KL of ``logits`` (sampler) against ``learner`` at each position."""
    import torch

    kl, gap = [], 0.0  # per sequence: positions of one sample correlate
    for want, tokens, got in zip(learner, sampled, logits, strict=True):
        lp_l = torch.log_softmax(want / TEMPERATURE, -1)
        lp_s = torch.log_softmax(got.float() / TEMPERATURE, -1)
        kl.append((lp_s.exp() * (lp_s - lp_l)).sum(-1))
        ratio = (lp_l - lp_s).gather(1, tokens[:, None])[:, 0]
        gap = max(gap, float(ratio.abs().max()))
    every = torch.cat(kl).double()
    low, high = interval(kl)
    return {"precision": name, "positions": len(every), "kl_mean": float(every.mean()),
            "kl_mean_95": [low, high],
            "kl_p99": float(torch.quantile(every, 0.99)), "kl_max": float(every.max()),
            "max_logprob_gap": gap, "bf16_share": share,
            "linears_speedup": base_s / seconds, "within_bound": high <= BOUND}


def interval(per_sequence: list[Any], draws: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the mean over positions, resampling whole sequences."""
    import torch

    sums = torch.tensor([float(k.double().sum()) for k in per_sequence], dtype=torch.float64)
    counts = torch.tensor([len(k) for k in per_sequence], dtype=torch.float64)
    pick = torch.randint(len(sums), (draws, len(sums)), generator=torch.Generator().manual_seed(0))
    means = sums[pick].sum(1) / counts[pick].sum(1)
    return float(torch.quantile(means, 0.025)), float(torch.quantile(means, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of the turns")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import torch
    from rollhub_gateway.engines.decoder import Decoder
    from rollhub_gateway.models import load_causal_lm

    torch.set_num_threads(args.threads)
    model, _ = load_causal_lm("smollm2-135m-instruct")
    model.eval()
    seqs = sequences(model, args.problems, args.samples, args.new, args.seed)
    with torch.inference_mode():
        learner = [model(torch.tensor([s])).logits[0, n - 1 : -1].float() for s, n in seqs]
    sampled = [torch.tensor(s[n:]) for s, n in seqs]
    base_s = step_linears_s(model)

    def run(decoder: Decoder) -> list[Any]:
        with torch.inference_mode():
            return [sampler_logits(decoder, s, n) for s, n in seqs]

    rows = [compare("float32", learner, sampled, run(Decoder(model)), base_s, base_s, 0.0)]
    for name, pick in SUBSETS.items():
        with bf16_math(model, pick) as share:
            logits, seconds = run(Decoder(model)), step_linears_s(model)
        rows.append(compare(name, learner, sampled, logits, seconds, base_s, share))
    half, _ = load_causal_lm("smollm2-135m-instruct", dtype="bfloat16")
    rows.append(compare("bfloat16 model", learner, sampled, run(Decoder(half.eval())),
                        step_linears_s(half), base_s, 1.0))
    del half
    rounded, _ = load_causal_lm("smollm2-135m-instruct")
    with torch.no_grad():
        for name, module in rounded.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "lm_head":
                module.weight.copy_(module.weight.bfloat16().float())
    rows.append(compare("weights rounded to bf16, float32 math", learner, sampled,
                        run(Decoder(rounded.eval())), base_s, base_s, 0.0))
    for row in rows:
        print(json.dumps(row))
    print(f"\n| precision | KL mean (95% interval) | KL p99 | KL max | max logprob gap | "
          f"bf16 share | linears speed-up | interval <= {BOUND:g} |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        low, high = r["kl_mean_95"]
        print(f"| {r['precision']} | {r['kl_mean']:.1e} ({low:.1e}-{high:.1e}) | {r['kl_p99']:.1e} | {r['kl_max']:.1e} "
              f"| {r['max_logprob_gap']:.3f} | {r['bf16_share']:.0%} "
              f"| {r['linears_speedup']:.2f}x | {'yes' if r['within_bound'] else 'no'} |")
    if args.out:
        meta = {"torch": torch.__version__, "threads": args.threads, "seed": args.seed,
                "temperature": TEMPERATURE, "bound": BOUND}
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

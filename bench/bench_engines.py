"""Throughput of the embedded transformers engine: single stream and concurrent requests.

Reproduce::

    HF_HUB_OFFLINE=1 python bench/bench_engines.py --tokens 64 --threads 2

Every request decodes exactly ``--tokens`` tokens (``ignore_eos``), greedy, each with its own
chat prompt. "sequential" runs the same N requests one after another; "concurrent N" submits
them at once so the engine batches them into one forward pass per step. Tokens/s counts
generated tokens only; TTFT is the mean time to the first token.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rollhub.sampling import SamplingParams
from rollhub_gateway.engines.transformers_engine import (
    TransformersBackend,
    TransformersOptions,
)

QUESTIONS = [
    "Write a haiku about rust.",
    "Name three rivers in Europe.",
    "Explain recursion briefly.",
    "What is a prime number?",
    "Describe the colour blue to a child.",
    "List two uses of copper.",
    "Why is the sea salty?",
    "Give a tip for learning to cook.",
]


async def run(
    backend: TransformersBackend, prompts: list[list[int]], tokens: int, concurrent: bool
):
    params = SamplingParams(max_tokens=tokens, temperature=0.0, extra={"ignore_eos": True})
    start = time.perf_counter()
    if concurrent:
        gens = await asyncio.gather(*(backend.generate(p, params) for p in prompts))
    else:
        gens = [await backend.generate(p, params) for p in prompts]
    wall = time.perf_counter() - start
    produced = sum(len(g.token_ids) for g in gens)
    ttft = statistics.mean(g.metrics["ttft_s"] for g in gens)
    return produced, wall, ttft


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    t0 = time.perf_counter()
    backend = TransformersBackend(
        TransformersOptions(model=args.model, threads=args.threads, max_batch_size=16)
    )
    await backend.start()
    load_s = time.perf_counter() - t0

    def render(q: str) -> list[int]:
        return list(
            backend.tokenizer.apply_chat_template(
                [{"role": "user", "content": q}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )

    prompts = [render(q) for q in QUESTIONS]
    await run(backend, prompts[:1], 8, False)  # warm-up

    rows = []
    single = await run(backend, prompts[:1], args.tokens, False)
    rows.append(("single stream", 1, *single))
    for n in (1, 4, 8):
        rows.append((f"concurrent {n}", n, *await run(backend, prompts[:n], args.tokens, True)))
    rows.append(("sequential 8", 8, *await run(backend, prompts[:8], args.tokens, False)))
    await backend.close()

    print(f"model load: {load_s:.1f} s; {args.tokens} tokens per request; threads={args.threads}")
    print("| mode | requests | tokens | wall s | tokens/s | mean TTFT s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, n, produced, wall, ttft in rows:
        print(f"| {name} | {n} | {produced} | {wall:.2f} | {produced / wall:.1f} | {ttft:.3f} |")
    seq = next(r for r in rows if r[0] == "sequential 8")
    conc = next(r for r in rows if r[0] == "concurrent 8")
    print(f"\nbatching speed-up at 8 requests: {(conc[2] / conc[3]) / (seq[2] / seq[3]):.2f}x")


if __name__ == "__main__":
    asyncio.run(main())

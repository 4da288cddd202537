"""Can bfloat16 units give float32-accurate products? A split-operand check.

    .venv/bin/python bench/bench_bf16_split.py --threads 1

Float32 accuracy from bfloat16 arithmetic is possible by splitting each operand into a
high and a low bfloat16 part and adding three products (``xh·wh + xh·wl + xl·wh``) in
float32; it needs products that *return* float32. This times, for one decoding step of
SmolLM2-135M at batch 32 (30 layers' seven projections and the output layer, the
weights as the engine holds them), the float32 products, the bfloat16 ones, and the
three-product split as torch can run it on this CPU, and reports each split product's
error against float64. It also reports whether torch offers a bfloat16 product with a
float32 result here (``torch.mm(..., out_dtype=torch.float32)``), and the same products in
float16 (weights and inputs rounded to float16, the result returned in float16: 3 more
mantissa bits than bfloat16, on the AVX512-FP16 units of CPUs that have them).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

#: (out, in) of one decoder layer's projections (q, o, k, v, gate, up, down)
LAYER = [(576, 576), (576, 576), (192, 576), (192, 576), (1536, 576), (1536, 576), (576, 1536)]
LAYERS = 30
HEAD = (49152, 576)


def _seconds(f: Callable[[], object], n: int) -> float:
    for _ in range(10):
        f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


def _split_product(x: torch.Tensor, wh: torch.Tensor, wl: torch.Tensor) -> torch.Tensor:
    xh = x.bfloat16()
    xl = (x - xh.float()).bfloat16()
    return F.linear(xh, wh).float() + F.linear(xh, wl).float() + F.linear(xl, wh).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    a, b = torch.randn(4, 4).bfloat16(), torch.randn(4, 4).bfloat16()
    try:
        torch.mm(a, b, out_dtype=torch.float32)
        fp32_out = "yes"
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        fp32_out = f"no ({str(exc).splitlines()[0][:80]})"
    totals = {"float32": 0.0, "bfloat16": 0.0, "bf16x3 split": 0.0, "float16": 0.0}
    rows = []
    for shape in [*LAYER, HEAD]:
        times = LAYERS if shape != HEAD else 1
        x = torch.randn(args.rows, shape[1])
        w = torch.randn(*shape) * 0.05
        wb = w.bfloat16()
        wl = (w - wb.float()).bfloat16()
        xb = x.bfloat16()
        xh, wh = x.half(), w.half()
        n = args.repeats if shape != HEAD else max(5, args.repeats // 20)
        t32 = _seconds(lambda x=x, w=w: F.linear(x, w), n)
        t16 = _seconds(lambda xb=xb, wb=wb: F.linear(xb, wb), n)
        t3 = _seconds(lambda x=x, wb=wb, wl=wl: _split_product(x, wb, wl), n)
        th = _seconds(lambda xh=xh, wh=wh: F.linear(xh, wh), n)
        exact = F.linear(x.double(), w.double())
        scale = exact.abs().max()
        err32 = float((F.linear(x, w).double() - exact).abs().max() / scale)
        err3 = float((_split_product(x, wb, wl).double() - exact).abs().max() / scale)
        errh = float((F.linear(xh, wh).double() - exact).abs().max() / scale)
        totals["float32"] += t32 * times
        totals["bfloat16"] += t16 * times
        totals["bf16x3 split"] += t3 * times
        totals["float16"] += th * times
        rows.append({"shape": shape, "per_step": times, "float32_us": round(t32 * 1e6),
                     "bfloat16_us": round(t16 * 1e6), "split_us": round(t3 * 1e6),
                     "float16_us": round(th * 1e6), "float32_error": err32,
                     "split_error": err3, "float16_error": errh})
    print(f"bfloat16 product with a float32 result on this CPU: {fp32_out}")
    print(f"{'shape':>12} {'float32':>9} {'bf16':>9} {'bf16x3':>9} {'float16':>9} "
          f"{'err f32':>9} {'err x3':>9} {'err f16':>9}")
    for r in rows:
        print(f"{r['shape'][0]:>6}x{r['shape'][1]:<5} {r['float32_us']:>7}us {r['bfloat16_us']:>7}us "
              f"{r['split_us']:>7}us {r['float16_us']:>7}us {r['float32_error']:>9.1e} "
              f"{r['split_error']:>9.1e} {r['float16_error']:>9.1e}")
    step = {k: round(v * 1e3, 1) for k, v in totals.items()}
    print(f"one decoding step's products at {args.rows} rows (ms): {json.dumps(step)}")


if __name__ == "__main__":
    main()

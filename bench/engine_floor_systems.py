"""The systems :mod:`bench_engine_floor` measures, each run alone in its own process.

Every system runs the same calculator workload (:func:`workload`): ``sessions`` sessions
in groups of up to 8 sharing one problem, each session two turns of exactly ``new``
sampled tokens (EOS ignored, so every system samples the same number of tokens): the
first on the ~300-token calculator prompt (system prompt, tool signatures, the worked
example, the question), the second on that prompt, the first turn's tokens and a reply.
A system prints one JSON line: sampled tokens, wall seconds, and what else it measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GROUP = 8
TEMPERATURE = 0.7
REPLY = "The calculator returned 9637."
#: what the second turn adds after the first turn's tokens (the chat template's rendering
#: of the end of the assistant turn and a user reply)
SUFFIX = f"<|im_end|>\n<|im_start|>user\n{REPLY}<|im_end|>\n<|im_start|>assistant\n"


def calc_messages(count: int) -> list[list[dict[str, Any]]]:
    """The first-turn messages of ``count`` problems of the main job's training set."""
    sys.path.insert(0, str(ROOT / "examples" / "math"))
    from calc_agent import SHOTS, SYSTEM_PROMPT  # type: ignore[import-not-found]

    lines = (ROOT / "examples/math/data/calc-train.jsonl").read_text().splitlines()
    questions = [json.loads(line)["question"] for line in lines[:count]]
    return [
        [{"role": "system", "content": SYSTEM_PROMPT}, *SHOTS, {"role": "user", "content": q}]
        for q in questions
    ]


def tools() -> list[dict[str, Any]]:
    sys.path.insert(0, str(ROOT / "examples" / "math"))
    from agent import CALCULATOR_TOOL  # type: ignore[import-not-found]

    return [CALCULATOR_TOOL]


def template() -> str:
    return (ROOT / "examples/math/chatml_tools.jinja").read_text()


def workload(sessions: int) -> tuple[list[list[int]], list[int], Any]:
    """First-turn prompt ids per session (groups of :data:`GROUP` share a problem), the
    second turn's suffix ids, and the tokenizer."""
    from rollhub_gateway.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    groups = max(1, sessions // GROUP)
    prompts = [
        list(tok.apply_chat_template(m, tools=tools(), chat_template=template(),
                                     add_generation_prompt=True, tokenize=True,
                                     return_dict=False))
        for m in calc_messages(groups)
    ]
    per_session = [prompts[i * groups // sessions] for i in range(sessions)]
    return per_session, tok.encode(SUFFIX, add_special_tokens=False), tok


def report(**row: Any) -> None:
    print("RESULT " + json.dumps(row), flush=True)


def thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by native id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


# -- matmul throughput --------------------------------------------------------------------


def matmul(sessions: list[int], threads: int) -> None:
    """GFLOP per CPU-second of the decode step's shapes with weights streamed from memory
    (as in a step: 30 layers' weights do not fit in cache), fp32 and bf16; and a square
    product."""
    import torch

    torch.set_num_threads(threads)
    rows: dict[str, float] = {}
    weights = [torch.randn(1536, 576) for _ in range(120)]  # 425 MB: out of cache
    for dtype in (torch.float32, torch.bfloat16):
        ws = [w.to(dtype) for w in weights]
        name = str(dtype).split(".")[-1]
        for batch in sessions:
            x = torch.randn(batch, 576).to(dtype)
            for w in ws[:10]:
                x @ w.T
            start = time.process_time()  # CPU time: what a core does, load or not
            for w in ws:
                x @ w.T
            took = time.process_time() - start
            rows[f"{name}_b{batch}"] = 2 * batch * 576 * 1536 * len(ws) / took / 1e9
        a = torch.randn(1024, 1024).to(dtype)
        a @ a
        start = time.process_time()
        for _ in range(10):
            a @ a
        rows[f"{name}_square"] = 2 * 1024**3 * 10 / (time.process_time() - start) / 1e9
        del ws
    report(system="matmul", gflops=rows)


# -- the bare static-cache loop -----------------------------------------------------------


def bare(batch: int, threads: int, new: int) -> None:
    """The engine's own forward pass in a plain loop: a static cache, one slot per
    session, every row in lockstep, no scheduling, no prefix sharing, one multinomial."""
    import torch
    from rollhub_gateway.engines.decoder import Chunk, Decoder, Pass
    from rollhub_gateway.engines.kv_store import SlotCache
    from rollhub_gateway.models import load_causal_lm

    torch.set_num_threads(threads)
    prompts, suffix, _ = workload(batch)
    model, _ = load_causal_lm("smollm2-135m-instruct")
    decoder = Decoder(model.eval())
    longest = max(len(p) for p in prompts) + 2 * new + len(suffix) + 2
    slots = SlotCache(decoder.shape, batch, longest, decoder.dtype)
    slots.reserve(longest, 0, batch)
    generator = torch.Generator().manual_seed(0)
    lengths = [0] * batch
    decode_s = decode_cpu = 0.0
    start, cpu = time.perf_counter(), time.process_time()
    feeds = prompts
    with torch.inference_mode():
        for _turn in range(2):
            step = Pass(tokens=[], positions=[], rows=0)
            for b, feed in enumerate(feeds):
                step.chunks.append(Chunk(len(step.tokens), len(feed), *slots.layers(b), lengths[b]))
                step.tokens += feed
                step.positions += range(lengths[b], lengths[b] + len(feed))
                lengths[b] += len(feed)
                step.sample.append(len(step.tokens) - 1)
            logits = decoder.forward(step, slots)
            t0, c0 = time.perf_counter(), time.process_time()
            out: list[list[int]] = [[] for _ in range(batch)]
            for _ in range(new):
                probs = torch.softmax(logits / TEMPERATURE, -1)
                ids = torch.multinomial(probs, 1, generator=generator)[:, 0].tolist()
                for b, i in enumerate(ids):
                    out[b].append(i)
                if len(out[0]) == new:
                    break
                step = Pass(tokens=ids, positions=list(lengths), rows=batch,
                            decode_slots=list(range(batch)), decode_write=list(lengths),
                            slot_len=[n + 1 for n in lengths], sample=list(range(batch)))
                logits = decoder.forward(step, slots)
                lengths = [n + 1 for n in lengths]
            decode_s += time.perf_counter() - t0
            decode_cpu += time.process_time() - c0
            feeds = [[o[-1], *suffix] for o in out]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    report(system="bare", sessions=batch, tokens=2 * new * batch, wall_s=wall, cpu_s=cpu,
           decode_tokens_per_s=2 * (new - 1) * batch / decode_s,
           decode_tokens_per_cpu_s=2 * (new - 1) * batch / decode_cpu)


# -- Hugging Face generate -----------------------------------------------------------------


def hf_generate(batch: int, threads: int, new: int) -> None:
    """``model.generate`` on the whole batch per turn, left-padded (TRL's CPU path)."""
    import torch
    from rollhub_gateway.models import load_causal_lm

    torch.set_num_threads(threads)
    prompts, suffix, tok = workload(batch)
    model, _ = load_causal_lm("smollm2-135m-instruct")
    model.eval()
    torch.manual_seed(0)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for _turn in range(2):
            width = max(len(p) for p in prompts)
            ids = torch.full((batch, width), tok.pad_token_id or 0, dtype=torch.long)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for b, p in enumerate(prompts):
                ids[b, width - len(p):] = torch.tensor(p)
                mask[b, width - len(p):] = 1
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=TEMPERATURE, top_k=0, top_p=1.0,
                                 max_new_tokens=new, min_new_tokens=new,
                                 pad_token_id=tok.pad_token_id or 0)
            sampled = out[:, width:].tolist()
            prompts = [p + s + suffix for p, s in zip(prompts, sampled, strict=True)]
    report(system="hf_generate", sessions=batch, tokens=2 * new * batch,
           wall_s=time.perf_counter() - start, cpu_s=time.process_time() - cpu)


# -- llama.cpp's server ---------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) another process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_server(batch: int, threads: int, new: int, binary: str) -> None:
    """llama.cpp's server with ``batch`` parallel slots on the model's own GGUF file,
    driven over HTTP with token-id prompts (``/completion``, prompt cache on)."""
    import aiohttp
    from rollhub_gateway.models import SMOLLM2_GGUF, smollm2_dir

    prompts, suffix, _ = workload(batch)
    port = free_port()
    ctx = max(len(p) for p in prompts) + 2 * new + len(suffix) + 64
    cmd = [binary, "-m", str(smollm2_dir() / SMOLLM2_GGUF), "--host", "127.0.0.1",
           "--port", str(port), "-np", str(batch), "-c", str(ctx * batch), "-t", str(threads),
           "-tb", str(threads), "--no-ui", "--log-disable"]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def run() -> float:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            for _ in range(600):
                try:
                    async with http.get(f"{url}/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)

            async def session(i: int, prompt: list[int]) -> int:
                got_tokens = 0
                for _turn in range(2):
                    body = {"prompt": prompt, "n_predict": new, "ignore_eos": True,
                            "temperature": TEMPERATURE, "top_k": 0, "top_p": 1.0,
                            "min_p": 0.0, "seed": i, "cache_prompt": True,
                            "return_tokens": True}
                    async with http.post(f"{url}/completion", json=body) as r:
                        got = await r.json()
                    prompt = prompt + got["tokens"] + suffix
                    got_tokens += len(got["tokens"])
                return got_tokens

            start, cpu = time.perf_counter(), process_cpu(server.pid)
            counts = await asyncio.gather(*(session(i, p) for i, p in enumerate(prompts)))
            return sum(counts), time.perf_counter() - start, process_cpu(server.pid) - cpu

    try:
        tokens, wall, cpu = asyncio.run(run())
    finally:
        server.terminate()
        server.wait(30)
    report(system="llama_server", sessions=batch, tokens=tokens, wall_s=wall, cpu_s=cpu)


# -- rollhub's engine: direct, and through the gateway --------------------------------------


def _backend(batch: int, threads: int) -> Any:
    """The transformers engine (of whichever source is first on the path), EOS ignored."""
    from dataclasses import replace

    from rollhub_gateway.engines.transformers_engine import (
        TransformersBackend,
        TransformersOptions,
    )

    class FixedLength(TransformersBackend):
        """Every turn samples exactly ``max_tokens``: no EOS, no stop id or string."""

        def _row(self, prompt_ids: list[int], params: Any, emit: Any) -> Any:
            params = replace(params, stop_token_ids=(), stop=(),
                             extra={**params.extra, "ignore_eos": True})
            return super()._row(prompt_ids, params, emit)

    return FixedLength(TransformersOptions(max_batch_size=max(batch, 1), threads=threads))


def engine(batch: int, threads: int, new: int, label: str) -> None:
    """Token ids straight into the engine (no HTTP, no rendering)."""
    from rollhub.sampling import SamplingParams

    prompts, suffix, _ = workload(batch)
    backend = _backend(batch, threads)

    async def run() -> tuple[int, float]:
        await backend.start()

        async def session(i: int, prompt: list[int]) -> int:
            got = 0
            for turn in range(2):
                params = SamplingParams(max_tokens=new, temperature=TEMPERATURE,
                                        seed=1000 * turn + i)
                gen = await backend.generate(prompt, params)
                prompt = prompt + gen.token_ids + suffix
                got += len(gen.token_ids)
            return got

        start, cpu = time.perf_counter(), time.process_time()
        counts = await asyncio.gather(*(session(i, p) for i, p in enumerate(prompts)))
        return sum(counts), time.perf_counter() - start, time.process_time() - cpu

    tokens, wall, cpu = asyncio.run(run())
    stats = backend.engine.stats
    report(system=label, sessions=batch, tokens=tokens, wall_s=wall, cpu_s=cpu,
           busy_s=stats["busy_s"], steps=stats["decode_steps"],
           forward_ms=_per_pass(stats), source=_source())
    backend.engine.stop()


def gateway(batch: int, threads: int, new: int, label: str) -> None:
    """The engine behind the gateway in this process; the sessions' OpenAI clients in
    another (as the agents' worker processes are), speaking HTTP."""
    from rollhub_gateway.chat_model import build_chat_model
    from rollhub_gateway.config import GatewayConfig
    from rollhub_gateway.gateway import Gateway

    backend = _backend(batch, threads)
    chat = build_chat_model("smollm2-135m-instruct", chat_template=template())
    cfg = GatewayConfig(admin_token="bench", log_turns=False,
                        policy={"temperature": TEMPERATURE, "max_concurrent_requests": 2})

    async def run() -> dict[str, Any]:
        gw = Gateway(backend, chat, cfg)
        await gw.start()
        keys = [gw.open_session(f"s{i}").key for i in range(batch)]
        client = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "client", gw.base_url, str(new), *keys,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": ""},
        )
        cpu0, process0 = thread_cpu(), time.process_time()
        out, _ = await client.communicate()
        process = time.process_time() - process0
        cpu = {tid: t - cpu0.get(tid, 0.0) for tid, t in thread_cpu().items()}
        stats = dict(backend.engine.stats)
        await gw.stop()
        got = json.loads(out.decode().strip().splitlines()[-1])
        # the event loop (HTTP, rendering, parsing) runs on the main thread; the engine's
        # thread and its intra-op workers are the rest
        loop_s = cpu.pop(threading.main_thread().native_id, 0.0)
        return {**got, "stats": stats, "loop_cpu_s": loop_s, "other_cpu_s": sum(cpu.values()),
                "cpu_s": process}

    got = asyncio.run(run())
    stats = got["stats"]
    report(system=label, sessions=batch, tokens=got["tokens"], wall_s=got["wall_s"],
           cpu_s=got["cpu_s"], client_cpu_s=got["client_cpu_s"],
           busy_s=stats.get("busy_s"), steps=stats.get("decode_steps"),
           forward_ms=_per_pass(stats), loop_cpu_s=got["loop_cpu_s"],
           engine_cpu_s=got["other_cpu_s"], source=_source())


def client(base_url: str, new: int, keys: list[str]) -> None:
    """The sessions: two chat turns each, all at once (run as its own process)."""
    import openai

    first = calc_messages(max(1, len(keys) // GROUP))

    async def run() -> dict[str, Any]:
        async def session(i: int, key: str) -> int:
            api = openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
            messages = list(first[i * len(first) // len(keys)])
            got = 0
            for _turn in range(2):
                r = await api.chat.completions.create(
                    model="smollm2-135m-instruct", messages=messages, tools=tools(),
                    max_tokens=new, temperature=TEMPERATURE)
                got += r.usage.completion_tokens
                messages += [{"role": "assistant", "content": r.choices[0].message.content or ""},
                             {"role": "user", "content": REPLY}]
            await api.close()
            return got

        start, cpu = time.perf_counter(), time.process_time()
        counts = await asyncio.gather(*(session(i, k) for i, k in enumerate(keys)))
        return {"tokens": sum(counts), "wall_s": time.perf_counter() - start,
                "client_cpu_s": time.process_time() - cpu}

    print(json.dumps(asyncio.run(run())), flush=True)


def _per_pass(stats: dict[str, Any]) -> float | None:
    """Mean milliseconds of a forward pass (engines that count them)."""
    if not stats.get("passes"):
        return None
    return round(1e3 * stats["forward_s"] / stats["passes"], 1)


def gil(batch: int, threads: int, new: int, duty: float = 0.2,
        switch_ms: float | None = None) -> None:
    """What pure-Python work beside the engine costs its decoding: the time of ``new``
    decoding steps of ``batch`` rows alone, with a thread of this process busy in Python
    ``duty`` of the time (as the gateway's event loop is), and with the same work in
    another process (same CPU load, no shared interpreter lock)."""
    import multiprocessing
    import threading as th

    import torch
    from rollhub_gateway.engines.decoder import Chunk, Decoder, Group, Pass
    from rollhub_gateway.engines.kv_store import SlotCache, Span
    from rollhub_gateway.models import load_causal_lm

    torch.set_num_threads(threads)
    if switch_ms is not None:
        sys.setswitchinterval(switch_ms / 1e3)
    prompts, _, _ = workload(1)
    model, _ = load_causal_lm("smollm2-135m-instruct")
    decoder = Decoder(model.eval())
    prompt = prompts[0]
    span = Span.empty(decoder.shape, len(prompt), decoder.dtype)
    slots = SlotCache(decoder.shape, batch, new + 1, decoder.dtype)
    slots.reserve(new + 1, 0, batch)

    def steps() -> float:
        start = time.perf_counter()
        for i in range(new):
            step = Pass(tokens=[5] * batch, positions=[len(prompt) + i] * batch, rows=batch,
                        decode_slots=list(range(batch)), decode_write=[i] * batch,
                        slot_len=[i + 1] * batch, sample=list(range(batch)),
                        groups=[Group(span, list(range(batch)), [len(prompt)] * batch)])
            decoder.forward(step, slots)
        return (time.perf_counter() - start) / new * 1e3

    with torch.inference_mode():
        decoder.forward(Pass(tokens=prompt, positions=list(range(len(prompt))), rows=0,
                             chunks=[Chunk(0, len(prompt), span.keys, span.values, 0)],
                             sample=[len(prompt) - 1]), slots)
        span.length = len(prompt)
        steps()  # warm
        alone = steps()
        stop = th.Event()
        worker = th.Thread(target=_python_work, args=(duty, stop))
        worker.start()
        beside = steps()
        stop.set()
        worker.join()
        ctx = multiprocessing.get_context("spawn")
        flag = ctx.Event()
        proc = ctx.Process(target=_python_work, args=(duty, flag))
        proc.start()
        time.sleep(1.0)  # its interpreter started
        apart = steps()
        flag.set()
        proc.join()
    report(system="gil", sessions=batch, duty=duty, switch_ms=sys.getswitchinterval() * 1e3,
           step_ms_alone=round(alone, 1),
           step_ms_thread=round(beside, 1), step_ms_process=round(apart, 1))


def _python_work(duty: float, stop: Any) -> None:
    """Pure-Python work (JSON round trips, as parsing and rendering are) ``duty`` of the
    time, in bursts of about a millisecond."""
    body = {"messages": [{"role": "user", "content": "What is 47 * 386?" * 4}] * 6}
    while not stop.is_set():
        start = time.perf_counter()
        while time.perf_counter() - start < 0.001:
            json.loads(json.dumps(body))
        time.sleep(0.001 * (1 - duty) / duty)


def _source() -> str:
    import rollhub_gateway

    return str(Path(rollhub_gateway.__file__).parent)


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    if kind == "client":
        client(rest[0], int(rest[1]), rest[2:])
    else:
        spec = json.loads(rest[0])
        {"matmul": matmul, "bare": bare, "hf_generate": hf_generate,
         "llama_server": llama_server, "engine": engine, "gateway": gateway,
         "gil": gil}[kind](**spec)

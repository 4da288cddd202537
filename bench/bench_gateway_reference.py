"""rollhub's gateway against the reference gateway (agentcore-rl-toolkit 0.1.4), per turn.

Reproduce::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_gateway_reference.py \\
        --plot docs/benchmarks/gateway-vs-reference.png

One run, one harness, the same tokenizer (SmolLM2's, with TRL's ``qwen2_5.jinja`` byte for
byte as its chat template) and the same scripted engine (0 ms, the same 32-id tool call
every turn). Each gateway runs in its own process (:mod:`bench_gateway_servers`); this
driver talks raw HTTP to it (aiohttp, the JSON an SDK sends) through 64-turn tool
sessions: system + user, then a tool call and its result every turn, the prompt growing
from ~550 to ~4,300 tokens. The reference runs from its own virtual environment
(``.venvs/bench-reference``), built here from :data:`REFERENCE_REQUIREMENTS` if missing;
it needs no torch: the tokenizer is handed over as a saved directory.

Measured, per gateway:

1. **CPU per turn** (c=1): the gateway process's CPU time (``/proc/<pid>/task/*/schedstat``,
   nanoseconds; ``utime + stime`` tick in 10 ms) around every call of ``--sessions``
   sequential 64-turn sessions, averaged per turn index.
2. **One-turn sessions/s**: open a session, one turn, finish it; ``--one-turn`` of them,
   8 at a time; the gateway's CPU per session.
3. **Throughput and memory**: ``--waves`` waves of 64 concurrent 64-turn sessions: turns/s,
   the gateway's and this driver's CPU per turn (who is the bottleneck), then the gateway's
   RSS growth per live session (all still open), then every session is finished and its
   records checked.

Every reply must be a tool call; a text reply (the reference's ``ill_formed`` fallback)
voids the comparison and the script exits 1, as does a session whose records do not
hold each sampled id exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))
import bench_gateway_servers as wl

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
REFERENCE_VENV = ROOT / ".venvs" / "bench-reference"
REFERENCE_REQUIREMENTS = ["agentcore-rl-toolkit[gateway]==0.1.4", "transformers==5.14.1"]
SHOWN_TURNS = (1, 32, 64)


# Environments and processes --------------------------------------------------------------


def reference_python() -> str:
    """The reference environment's interpreter, built from the pinned requirements if missing."""
    py = REFERENCE_VENV / "bin" / "python"
    probe = [str(py), "-c", "import agentcore_rl_toolkit.rollout_gateway, aiohttp, transformers"]
    if py.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(py)
    print(f"building {REFERENCE_VENV} ({' '.join(REFERENCE_REQUIREMENTS)})", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(REFERENCE_VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *REFERENCE_REQUIREMENTS], check=True)
    return str(py)


def write_tokenizer(path: Path) -> None:
    """SmolLM2's tokenizer with TRL's qwen2_5.jinja as chat template, saved for both sides."""
    from rollhub_gateway.models import load_tokenizer

    spec = importlib.util.find_spec("trl")
    assert spec is not None and spec.origin is not None, "pip install trl (its chat templates)"
    template = (Path(spec.origin).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    tok = load_tokenizer("smollm2-135m-instruct")
    tok.chat_template = template
    tok.save_pretrained(path)
    saved = (path / "chat_template.jinja").read_text()
    assert saved == template, "the saved chat template must be qwen2_5.jinja byte for byte"


class Server:
    """One gateway process (``which``: rollhub or reference)."""

    def __init__(self, which: str, python: str, tok_dir: Path) -> None:
        self.which = which
        script = str(Path(__file__).parent / "bench_gateway_servers.py")
        self.proc = subprocess.Popen(
            [python, script, which, str(tok_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise SystemExit(f"{which} gateway did not start")
        self.url, self.pid = line[1], int(line[2])

    def cpu_s(self) -> float:
        """CPU time of the process's live threads, in seconds (nanosecond resolution)."""
        total = 0
        for task in os.listdir(f"/proc/{self.pid}/task"):
            try:
                with open(f"/proc/{self.pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except FileNotFoundError:  # a thread that just ended
                pass
        return total / 1e9

    def rss_kib(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    async def open(self, http: Any) -> tuple[str, str]:
        """``(session id, api key)`` of a new session."""
        if self.which == "rollhub":
            auth = {"Authorization": f"Bearer {wl.ADMIN_TOKEN}"}
            async with http.post(f"{self.url}/sessions", json={}, headers=auth) as r:
                body = await r.json()
            return body["session_id"], body["api_key"]
        sid = uuid.uuid4().hex
        async with http.post(f"{self.url}/bench/open", json={"sid": sid}) as r:
            r.raise_for_status()
        return sid, sid

    async def finish(self, http: Any, sid: str) -> tuple[int, int]:
        """Finish a session: ``(records, sampled tokens in them)``."""
        if self.which == "rollhub":
            auth = {"Authorization": f"Bearer {wl.ADMIN_TOKEN}"}
            async with http.post(f"{self.url}/sessions/{sid}/finish", headers=auth) as r:
                traces = (await r.json())["traces"]
            return len(traces), sum(sum(t["response_mask"]) for t in traces)
        async with http.post(f"{self.url}/bench/finish", json={"sid": sid}) as r:
            body = await r.json()
        return body["records"], body["sampled"]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# The agent ----------------------------------------------------------------------------------


class Tally:
    """Replies that were not tool calls, and prompt sizes seen per turn index."""

    def __init__(self) -> None:
        self.text_replies = 0
        self.errors = 0
        self.prompt_tokens: dict[int, int] = {}


async def agent(
    http: Any, srv: Server, key: str, turns: int, tally: Tally, cpu: list[list[float]] | None = None
) -> None:
    """One 64-turn tool session over raw HTTP; ``cpu[i]`` gets the gateway CPU of turn i."""
    messages = wl.first_messages()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    url = f"{srv.url}/v1/chat/completions"
    for i in range(turns):
        body = orjson.dumps(
            {"model": "m", "messages": messages, "tools": wl.TOOLS, "max_tokens": 256}
        )
        c0 = srv.cpu_s() if cpu is not None else 0.0
        async with http.post(url, data=body, headers=headers) as r:
            raw, status = await r.read(), r.status
        if cpu is not None:
            cpu[i].append(srv.cpu_s() - c0)
        if status != 200:
            tally.errors += 1
            raise RuntimeError(f"{srv.which} turn {i}: HTTP {status}: {raw[:300]!r}")
        reply = orjson.loads(raw)
        tally.prompt_tokens.setdefault(i + 1, reply["usage"]["prompt_tokens"])
        msg = {k: v for k, v in reply["choices"][0]["message"].items() if v is not None}
        calls = msg.get("tool_calls") or []
        if not calls:
            tally.text_replies += 1
            msg, calls = {"role": "assistant", "content": msg.get("content") or ""}, []
        messages.append(msg)
        call_id = calls[0]["id"] if calls else "none"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": wl.tool_result(i)})


# Phases -------------------------------------------------------------------------------------


async def measure(srv: Server, args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    out: dict[str, Any] = {"gateway": srv.which}
    tally = Tally()
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=1200)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as http:
        sid, key = await srv.open(http)  # warm-up: first calls import and compile lazily
        await agent(http, srv, key, args.turns, tally)
        await srv.finish(http, sid)

        # 1. CPU per turn, c=1
        cpu: list[list[float]] = [[] for _ in range(args.turns)]
        for _ in range(args.sessions):
            sid, key = await srv.open(http)
            await agent(http, srv, key, args.turns, tally, cpu)
            await srv.finish(http, sid)
        out["cpu_ms_per_turn"] = [sum(c) / len(c) * 1e3 for c in cpu]

        # 2. one-turn sessions
        queue = list(range(args.one_turn))

        async def worker() -> None:
            while queue:
                queue.pop()
                s, k = await srv.open(http)
                await agent(http, srv, k, 1, tally)
                await srv.finish(http, s)

        c0, t0 = srv.cpu_s(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(8)))
        wall = time.perf_counter() - t0
        out["one_turn_sessions_per_s"] = args.one_turn / wall
        out["one_turn_cpu_ms"] = (srv.cpu_s() - c0) / args.one_turn * 1e3

        # 3. throughput at 64 concurrent sessions, then memory per live session
        rss0 = srv.rss_kib()
        live: list[str] = []
        turns = wall = gw_cpu = drv_cpu = 0.0
        for _ in range(args.waves):
            opened = [await srv.open(http) for _ in range(args.concurrency)]
            live += [s for s, _ in opened]
            c0, d0, t0 = srv.cpu_s(), time.process_time(), time.perf_counter()
            await asyncio.gather(*(agent(http, srv, k, args.turns, tally) for _, k in opened))
            wall += time.perf_counter() - t0
            gw_cpu += srv.cpu_s() - c0
            drv_cpu += time.process_time() - d0
            turns += args.concurrency * args.turns
        rss1 = srv.rss_kib()
        out.update(
            turns_per_s=turns / wall,
            gateway_cpu_ms_per_turn_c64=gw_cpu / turns * 1e3,
            driver_cpu_ms_per_turn_c64=drv_cpu / turns * 1e3,
            gateway_cpu_share_c64=gw_cpu / wall,
            driver_cpu_share_c64=drv_cpu / wall,
            live_sessions=len(live),
            kib_per_live_session=(rss1 - rss0) / len(live),
        )
        bad = n_records = 0
        for sid in live:
            records, sampled = await srv.finish(http, sid)
            n_records += records
            # every sampled id is trained exactly once; rollhub keeps one record per session
            bad += sampled != args.turns * len(wl_output_ids())
            bad += srv.which == "rollhub" and records != 1
        out.update(
            records_per_session=n_records / len(live),
            sessions_with_unexpected_records=bad,
            text_replies=tally.text_replies,
            errors=tally.errors,
            prompt_tokens={t: tally.prompt_tokens.get(t) for t in SHOWN_TURNS},
        )
    return out


_OUT_IDS: list[int] = []


def wl_output_ids() -> list[int]:
    """The engine's output ids (computed once, with the same tokenizer)."""
    if not _OUT_IDS:
        from rollhub_gateway.models import load_tokenizer

        tok = load_tokenizer("smollm2-135m-instruct")
        _OUT_IDS.extend(tok.encode(wl.OUTPUT_TEXT, add_special_tokens=False))
    return _OUT_IDS


# Report -------------------------------------------------------------------------------------


def report(results: list[dict[str, Any]], load: tuple[float, float]) -> str:
    by = {r["gateway"]: r for r in results}
    names = [n for n in ("rollhub", "reference") if n in by]
    lines = [f"load average at start / end: {load[0]:.2f} / {load[1]:.2f}", ""]
    lines.append("| measure | " + " | ".join(names) + " |")
    lines.append("| --- |" + " --- |" * len(names))

    def row(label: str, fn: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(fn(by[n]) for n in names) + " |")

    for t in SHOWN_TURNS:
        row(f"gateway CPU, turn {t} (c=1)", lambda r, t=t: f"{r['cpu_ms_per_turn'][t - 1]:.2f} ms")
        row(f"prompt tokens, turn {t}", lambda r, t=t: str(r["prompt_tokens"][t]))
    row("one-turn sessions/s (8 at a time)", lambda r: f"{r['one_turn_sessions_per_s']:.0f}")
    row("gateway CPU per one-turn session", lambda r: f"{r['one_turn_cpu_ms']:.2f} ms")
    row("turns/s, 64 concurrent 64-turn sessions", lambda r: f"{r['turns_per_s']:.0f}")
    row(
        "gateway / driver CPU per turn at c=64",
        lambda r: (
            f"{r['gateway_cpu_ms_per_turn_c64']:.2f} / {r['driver_cpu_ms_per_turn_c64']:.2f} ms"
        ),
    )
    row(
        "gateway / driver busy at c=64 (cores)",
        lambda r: f"{r['gateway_cpu_share_c64']:.2f} / {r['driver_cpu_share_c64']:.2f}",
    )
    row("RSS per live 64-turn session", lambda r: f"{r['kib_per_live_session']:.0f} KiB")
    row("replies without a tool call / errors", lambda r: f"{r['text_replies']} / {r['errors']}")
    row("records per 64-turn session", lambda r: f"{r['records_per_session']:.0f}")
    row("sessions with unexpected records", lambda r: str(r["sessions_with_unexpected_records"]))
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ys = r["cpu_ms_per_turn"]
        ax.plot(range(1, len(ys) + 1), ys, label=r["gateway"], marker=".", linewidth=1)
    ax.set_xlabel("turn index (64-turn tool session, raw HTTP, engine 0 ms, c=1)")
    ax.set_ylabel("gateway CPU per turn (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=16, help="sequential sessions (c=1)")
    parser.add_argument("--one-turn", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--only", choices=["rollhub", "reference"])
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument("--plot", type=Path, help="write the CPU-per-turn plot here")
    args = parser.parse_args()
    load0 = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp) / "tokenizer"
        write_tokenizer(tok_dir)
        wl_output_ids()
        for which in ("rollhub", "reference"):
            if args.only and which != args.only:
                continue
            python = sys.executable if which == "rollhub" else reference_python()
            srv = Server(which, python, tok_dir)
            try:
                results.append(asyncio.run(measure(srv, args)))
            finally:
                srv.stop()
    print(report(results, (load0, os.getloadavg()[0])))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
    if any(r["text_replies"] or r["sessions_with_unexpected_records"] for r in results):
        print(
            "VOID: a gateway returned text instead of tool calls or wrong records", file=sys.stderr
        )
        sys.exit(1)


if __name__ == "__main__":
    main()

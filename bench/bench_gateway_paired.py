"""Old and new code of rollhub's gateway, paired: two gateway processes in one run, 64-turn
tool sessions alternating between them, gateway CPU per turn at turns 1, 32 and 64.

Reproduce (``OLD``: a checkout of the code to compare with, e.g. ``git worktree add``)::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_gateway_paired.py --old OLD --sessions 12

The sessions, tokenizer, engine and CPU reading are those of
:mod:`bench_gateway_reference` (the same workload as against the reference gateway); each
process runs its own tree's ``bench/bench_gateway_servers.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_gateway_reference as ref

ROOT = Path(__file__).resolve().parent.parent
SHOWN = (1, 32, 64)


class TreeServer(ref.Server):
    """A rollhub gateway process running the code of the checkout at ``tree``."""

    def __init__(self, tree: Path, tok_dir: Path) -> None:
        self.which = "rollhub"
        env = dict(os.environ)
        paths = [str(tree / p) for p in ("core", "gateway", "sandbox")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        script = tree / "bench" / "bench_gateway_servers.py"
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "rollhub", str(tok_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line or line[0] != "READY":
            raise SystemExit(f"the gateway of {tree} did not start")
        self.url, self.pid = line[1], int(line[2])


async def paired(
    servers: dict[str, TreeServer], sessions: int, turns: int
) -> dict[str, list[float]]:
    import aiohttp

    tally = ref.Tally()
    cpu: dict[str, list[list[float]]] = {name: [[] for _ in range(turns)] for name in servers}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1200)) as http:
        for rnd in range(sessions + 1):  # round 0 warms both up
            for name, srv in servers.items():
                sid, key = await srv.open(http)
                await ref.agent(http, srv, key, turns, tally, cpu[name] if rnd else None)
                await srv.finish(http, sid)
    if tally.text_replies or tally.errors:
        raise SystemExit(f"{tally.text_replies} text replies, {tally.errors} errors")
    return {n: [sum(c) / len(c) * 1e3 for c in per] for n, per in cpu.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the old code")
    parser.add_argument("--sessions", type=int, default=12, help="sessions per gateway")
    parser.add_argument("--turns", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp) / "tokenizer"
        ref.write_tokenizer(tok_dir)
        servers = {"old": TreeServer(args.old, tok_dir), "new": TreeServer(ROOT, tok_dir)}
        try:
            ms = asyncio.run(paired(servers, args.sessions, args.turns))
        finally:
            for srv in servers.values():
                srv.stop()
    print(f"gateway CPU per turn, ms (mean of {args.sessions} sessions each, alternating)")
    print("| turn | old | new | new / old |\n| --- | --- | --- | --- |")
    for t in (t for t in SHOWN if t <= args.turns):
        old, new = ms["old"][t - 1], ms["new"][t - 1]
        print(f"| {t} | {old:.2f} | {new:.2f} | {new / old:.2f} |")
    mean_old, mean_new = (sum(v) / len(v) for v in (ms["old"], ms["new"]))
    print(f"| all turns | {mean_old:.2f} | {mean_new:.2f} | {mean_new / mean_old:.2f} |")


if __name__ == "__main__":
    main()

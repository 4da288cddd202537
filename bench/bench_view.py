"""``rollhub view`` on a 100,000-episode run, measured in real Chromium.

    .venv/bin/python bench/bench_view.py [--episodes 100000] [--runs 5] [--opens 20]

Writes a synthetic finished training run (``rollhub_view.synthetic``: 100 steps × 125
groups × 8 samples, SmolLM2's tokenizer named so token ids decode to text), starts the real
command (``rollhub view RUN --port 0``) and reports:

- indexing: seconds from starting the command to its URL (the whole ``episodes.jsonl`` read
  once, by byte offset) and the server's resident memory;
- overview (target first paint ≤ 1 s): a fresh Chromium (empty cache) per run opening
  ``/#overview``: first contentful paint, the run's status and config shown
  (``rollhub:overview``), and every chart drawn (``rollhub:charts``, plotly.js loaded after
  the first paint);
- episode (target ≤ 300 ms): from setting ``#episode/0/N`` on the episodes view to the
  episode's turns and every token span in the page and painted (two animation frames),
  for random episodes;
- the table's server-side query over every episode (a text filter and a sort).

Needs /usr/bin/chromium and chromedriver (Debian: ``apt-get install chromium
chromium-driver``) and ``selenium``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rollhub_view.synthetic import episode_row, write_synthetic_run

MODEL = "smollm2-135m-instruct"
LONG = 20


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _wait(driver, script: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := driver.execute_script(script)):
        if time.monotonic() > deadline:
            raise TimeoutError(script)
        time.sleep(0.01)
    return value


def _mark(driver, name: str) -> float:
    return _wait(driver, f"const m = performance.getEntriesByName('{name}');"
                         "return m.length ? m[0].startTime : 0")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


OPEN_JS = """
const [n, done] = [arguments[0], arguments[arguments.length - 1]];
delete document.body.dataset.ready;
const t0 = performance.now();
location.hash = '#episode/0/' + n;
(function check() {
  if (document.body.dataset.ready === 'episode')
    requestAnimationFrame(() => requestAnimationFrame(() =>
      done([performance.now() - t0, document.querySelectorAll('#view-episode .tokens .tok').length])));
  else requestAnimationFrame(check);
})();
"""


def _report_opens(what: str, opens: list[float], tokens: list[int]) -> None:
    opens = sorted(opens)
    p95 = opens[min(len(opens) - 1, int(0.95 * len(opens)))]
    print(f"episode open ({what}, {statistics.median(tokens):.0f} token spans median): "
          f"{statistics.median(opens):.0f} ms median, p95 {p95:.0f} ms, max {opens[-1]:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5, help="cold overview loads")
    ap.add_argument("--opens", type=int, default=20, help="episodes opened")
    ap.add_argument("--dir", type=Path, default=None, help="where the run goes (default: tmp)")
    args = ap.parse_args()

    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-view-"))
    groups, size = 125, 8
    steps = max(1, args.episodes // (groups * size))
    t0 = time.perf_counter()
    run = write_synthetic_run(root / "run", steps=steps, groups=groups, group_size=size,
                              model=MODEL, seed=1)
    # the last LONG episodes are the calculator's size (≈300 prompt tokens): opened too
    rng = random.Random(3)
    with (run / "episodes.jsonl").open("a") as f:
        for i in range(LONG):
            f.write(json.dumps(episode_row(steps - 1, groups, i, rng, prompt_len=300)) + "\n")
    mb = (run / "episodes.jsonl").stat().st_size / 1e6
    total = steps * groups * size + LONG
    print(f"synthetic run: {total} episodes, episodes.jsonl {mb:.1f} MB "
          f"(written in {time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rollhub"), "view", str(run),
                             "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        indexed = time.perf_counter() - t0
        url = line.split()[2].rstrip("/")
        print(f"indexing: command start to URL {indexed:.2f} s; server RSS "
              f"{_rss_mib(proc.pid):.0f} MiB")
        for q in ({"q": "g0050-07", "sort": "reward", "desc": 1}, {"status": "error"},
                  {"sort": "elapsed", "desc": 1, "page": 100}):
            httpx.get(f"{url}/api/runs/0/episodes", params=q)  # warm
            ts = []
            for _ in range(5):
                t = time.perf_counter()
                body = httpx.get(f"{url}/api/runs/0/episodes", params=q).json()
                ts.append(time.perf_counter() - t)
            print(f"table query {q}: {statistics.median(ts) * 1000:.0f} ms median "
                  f"({body['total']} of {body['episodes']} match)")

        fcp, shown, charts, warm, plotly = [], [], [], [], []
        for _ in range(args.runs):
            driver = _browser()
            try:
                driver.get(f"{url}/#overview")
                _wait(driver, "return document.body.dataset.charted === '1'")
                fcp.append(_wait(driver, "const p = performance.getEntriesByName("
                                         "'first-contentful-paint'); return p.length && "
                                         "p[0].startTime"))
                shown.append(_mark(driver, "rollhub:overview"))
                charts.append(_mark(driver, "rollhub:charts"))
                plotly.append(driver.execute_script(
                    "const r = performance.getEntriesByType('resource').find(e => "
                    "e.name.endsWith('plotly.min.js')); return r ? r.responseEnd : null"))
                driver.get(f"{url}/?again#overview")  # a second visit: plotly.js cached
                _wait(driver, "return document.body.dataset.charted === '1'")
                warm.append(_mark(driver, "rollhub:charts"))
            finally:
                driver.quit()
        med = statistics.median
        print(f"overview (cold, {args.runs} runs): first contentful paint {med(fcp):.0f} ms "
              f"median (max {max(fcp):.0f}); status and config shown {med(shown):.0f} ms; "
              f"plotly.js (4.8 MB) received {med(plotly):.0f} ms; "
              f"all charts drawn {med(charts):.0f} ms (max {max(charts):.0f}); again with "
              f"plotly.js cached: all charts drawn {med(warm):.0f} ms")

        driver = _browser()
        try:
            driver.set_script_timeout(60)
            driver.get(f"{url}/#episodes")
            _wait(driver, "return document.body.dataset.ready === 'episodes'")
            first = driver.execute_async_script(OPEN_JS, 0)  # the tokenizer may still load
            rng = random.Random(2)
            opens, tokens = [], []
            for _ in range(args.opens):
                ms, n_tok = driver.execute_async_script(OPEN_JS, rng.randrange(total - LONG))
                opens.append(ms)
                tokens.append(n_tok)
            _report_opens(f"{args.opens} random episodes", opens, tokens)
            opens, tokens = [], []
            for i in range(LONG):
                ms, n_tok = driver.execute_async_script(OPEN_JS, total - LONG + i)
                opens.append(ms)
                tokens.append(n_tok)
            _report_opens(f"{LONG} calculator-sized episodes", opens, tokens)
            print(f"(first open, tokenizer warm-up: {first[0]:.0f} ms)")
        finally:
            driver.quit()
    finally:
        proc.terminate()
        proc.wait(10)
    if args.dir:
        print(f"run directory left in {root}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

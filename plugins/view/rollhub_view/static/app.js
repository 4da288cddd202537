// rollhub view: the page. Plain JS, no build step. All model text goes into the DOM through
// textContent (the el() helper), never as HTML.
"use strict";

const COLORS = ["#2f6fdd", "#d9541e", "#1a7f37", "#8250df", "#bf8700", "#0a7ea4", "#c9382a", "#57606a"];
const CHARTS = [
  ["Reward (mean)", ["reward_mean"]],
  ["Task success", ["success_rate"]],
  ["Tool-call rate", ["tool_call_rate"]],
  ["Loss", ["loss"]],
  ["Staleness", ["staleness_max", "staleness_mean"]],
  ["Tokens per step", ["sampled_tokens", "masked_tokens"]],
  ["Seconds per step", ["time_step_s", "time_sample_s", "time_train_s"]],
  ["Idle fraction", ["sampler_idle_frac", "trainer_idle_frac"]],
  ["Throughput (sampled tokens / s)", ["_tokens_per_s"]],
  ["Failed episodes per step", ["episodes_failed"]],
];
// runs with several [[policies]]: one chart per figure, a line per policy (policy/<name>/<key>)
const POLICY_CHARTS = [
  ["Task success by policy", "success_rate"],
  ["Reward by policy", "reward_mean"],
  ["Loss by policy", "loss"],
  ["Sampled tokens by policy", "sampled_tokens"],
  ["Staleness by policy", "staleness_max"],
];
function policyNames(all) {
  const names = new Set();
  all.forEach(rows => rows.forEach(row => Object.keys(row).forEach(k => {
    const m = /^policy\/([^/]+)\/success_rate$/.exec(k);
    if (m) names.add(m[1]);
  })));
  return [...names].sort();
}
function policyCharts(all) {
  const names = policyNames(all);
  return names.length ? POLICY_CHARTS.map(([title, key]) => [title, names.map(n => `policy/${n}/${key}`)]) : [];
}
const PAGE_SIZE = 50;

const S = {
  runs: [], metrics: {}, stats: {}, poll: {}, plotly: null,
  q: { run: 0, sort: "n", desc: false, page: 0 }, facetsFor: null,
};

// ---- DOM helpers ----------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
const $ = (sel) => document.querySelector(sel);
const fmt = (v, d = 3) => (v === null || v === undefined) ? "–" :
  (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(d)) : String(v));
async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}
function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(p => p).map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
}

// ---- plotly, loaded after the first paint ---------------------------------------------
function loadPlotly() {
  if (S.plotly) return S.plotly;
  S.plotly = new Promise((resolve) => {
    const s = el("script", { src: "/static/plotly.min.js" });
    s.onload = () => resolve(window.Plotly || null);
    s.onerror = () => resolve(null);
    document.head.append(s);
  });
  return S.plotly;
}
async function plot(div, traces, layout) {
  const Plotly = await loadPlotly();
  if (!Plotly) { div.replaceChildren(el("div", { class: "placeholder" }, "plotly.js is not available")); return; }
  const base = { margin: { l: 50, r: 10, t: 30, b: 35 }, title: { text: layout.title, font: { size: 13 } },
                 legend: { orientation: "h", y: -0.2 }, font: { size: 11 } };
  if (div.querySelector(".placeholder")) div.replaceChildren();
  await Plotly.react(div, traces, { ...base, ...layout, title: base.title }, { displaylogo: false, displayModeBar: false, responsive: true });
}

// ---- runs, chips, live polling ----------------------------------------------------------
async function loadRuns() {
  const { runs } = await api("/api/runs");
  S.runs = runs;
  const bar = $("#runs");
  bar.replaceChildren(...runs.map((r, i) => el("span", { class: "chip", "data-run": i },
    el("span", { class: "dot", style: `background:${COLORS[i % COLORS.length]}` }), r.name, " · ",
    el("span", { class: `status-${r.status}` }, r.status), " · ",
    r.kind === "training" ? `step ${r.steps_done}${r.steps_total ? "/" + r.steps_total : ""} · ` : "rollouts · ",
    `${r.episodes} episodes`)));
  const sel = $("#filters select[name=run]");
  if (sel.options.length !== runs.length) {
    sel.replaceChildren(...runs.map((r, i) => el("option", { value: i }, r.name)));
    sel.closest("label").hidden = runs.length < 2;
  }
  return runs;
}

async function pollOnce() {
  let changed = false;
  try {
    const { runs } = await api("/api/poll");
    for (const r of runs) {
      const old = S.poll[r.id];
      if (old && (old.steps_done !== r.steps_done || old.episodes !== r.episodes ||
                  old.generation !== r.generation || old.status !== r.status)) changed = true;
      S.poll[r.id] = r;
    }
    $("#live").classList.toggle("on", runs.some(r => r.status === "running"));
  } catch (e) { return; }
  if (!changed) return;
  await loadRuns();
  const view = currentView();
  if (view === "overview") await renderOverview(true);
  else if (view === "episodes") await renderEpisodes(true);
}

// ---- overview ---------------------------------------------------------------------------
async function fetchMetrics(i) {
  const have = S.metrics[i] || [];
  const since = (S.runs[i] && S.runs[i].steps_done < have.length) ? 0 : have.length;
  const body = await api(`/api/runs/${i}/metrics?since=${since}`);
  S.metrics[i] = since === 0 ? body.rows : have.concat(body.rows);
  return S.metrics[i];
}
// steps are whole numbers: a 2-step run labels its axis 1, 2 (not 1, 1, 1, 2, 2, 2)
function stepAxis(all) {
  const steps = Math.max(1, ...all.map(rows => rows.length));
  return { title: { text: "step" }, tickmode: "linear", tick0: 1, dtick: Math.max(1, Math.ceil(steps / 12)), tickformat: "d" };
}
function metricValue(row, key) {
  if (key === "_tokens_per_s") {
    const t = row.time_step_s || ((row.time_sample_s || 0) + (row.time_train_s || 0));
    return (row.sampled_tokens && t) ? row.sampled_tokens / t : null;
  }
  const v = row[key];
  return typeof v === "number" ? v : null;
}
function runCard(r, i) {
  const cfg = r.config || {};
  const exp = cfg.experiment || {}, tr = cfg.training || {}, trainer = cfg.trainer || {};
  const ev = r.eval || {};
  const withCi = (rep) => !rep ? "–" : fmt(rep.pass_at_1, 2) + (rep.pass_at_1_ci ? ` [${fmt(rep.pass_at_1_ci[0], 2)}, ${fmt(rep.pass_at_1_ci[1], 2)}]` : "");
  const evalLine = ev.before || ev.after ? `pass@1 ${withCi(ev.before)} → ${withCi(ev.after)}` : null;
  const splits = Object.keys((ev.after && ev.after.splits) || (ev.before && ev.before.splits) || {});
  const policies = Object.keys((ev.after && ev.after.policies) || (ev.before && ev.before.policies) || {});
  const ofPolicy = (rep, p) => rep && rep.policies && rep.policies[p];
  const m = r.manifest || {};
  const code = m.git ? `${m.git.commit.slice(0, 10)}${m.git.dirty ? " (dirty)" : ""}` : (r.manifest ? "not a git checkout" : null);
  const sum = r.summary || {};
  return el("div", { class: "card", "data-run": i },
    el("h3", {}, el("span", { class: "dot", style: `display:inline-block;width:.7em;height:.7em;border-radius:50%;margin-right:.4em;background:${COLORS[i % COLORS.length]}` }), r.name),
    kv([["status", el("span", { class: `status-${r.status}`, id: `status-${i}` }, r.status)],
        ["kind", r.kind],
        r.kind === "training" ? ["steps", `${r.steps_done}${r.steps_total ? " / " + r.steps_total : ""}`] : null,
        ["episodes", String(r.episodes)],
        ["model", r.model || "–"],
        ["trainer", trainer.name || "–"],
        ["group size", fmt(exp.n_samples)],
        r.kind === "training" ? ["groups / step", fmt(tr.batch_groups)] : null,
        evalLine ? ["held-out", evalLine] : null,
        ...splits.map(sp => [`held-out ${sp}`, `pass@1 ${withCi(ev.before && ev.before.splits && ev.before.splits[sp])} → ${withCi(ev.after && ev.after.splits && ev.after.splits[sp])}`]),
        ...policies.map(p => [`held-out, policy ${p}`, `pass@1 ${withCi(ofPolicy(ev.before, p))} → ${withCi(ofPolicy(ev.after, p))}`]),
        m.seed !== undefined ? ["seed", fmt(m.seed)] : null,
        code ? ["code", code] : null,
        sum.episodes_per_s ? ["episodes / s", fmt(sum.episodes_per_s, 2)] : null,
        ["directory", r.path]]),
    el("details", {}, el("summary", {}, "config"), el("pre", {}, JSON.stringify(cfg, null, 2))),
    r.manifest ? el("details", { class: "manifest" }, el("summary", {}, "manifest (code, versions, machine, command)"),
      el("pre", {}, JSON.stringify({ git: m.git, project_git: m.project_git, command: m.command, created: m.created,
                                     versions: m.versions, machine: m.machine, resumed: m.resumed }, null, 2))) : null);
}
async function renderOverview(live) {
  const runs = S.runs;
  const cards = $("#run-cards");
  cards.replaceChildren(...runs.map(runCard));
  loadPlotly();  // in parallel with the numbers
  const statsAsked = Promise.all(runs.map((r, i) => api(`/api/runs/${i}/stats`)));
  const all = await Promise.all(runs.map((r, i) => r.kind === "training" ? fetchMetrics(i) : Promise.resolve([])));
  const charts = $("#charts");
  const drawn = [];
  const wanted = [...CHARTS, ...policyCharts(all)].filter(([, keys]) => all.some(rows => rows.some(row => keys.some(k => metricValue(row, k) !== null))));
  // one div per chart, kept across live updates so plotly only redraws
  for (const [title, keys] of wanted) {
    let div = charts.querySelector(`[data-chart="${title}"]`);
    if (!div) { div = el("div", { class: "chart", "data-chart": title }, el("div", { class: "placeholder" }, `${title}: loading chart…`)); charts.append(div); }
    const traces = [];
    runs.forEach((r, i) => keys.forEach((k, j) => {
      const rows = all[i].filter(row => metricValue(row, k) !== null);
      if (!rows.length) return;
      traces.push({ x: rows.map(row => row.step + 1), y: rows.map(row => metricValue(row, k)), mode: "lines+markers",
                    name: runs.length > 1 ? `${r.name}${keys.length > 1 ? " · " + k : ""}` : k.replace(/^policy\/([^/]+)\/.*$/, "$1"),
                    line: { color: COLORS[i % COLORS.length], dash: ["solid", "dot", "dash"][j % 3] } });
    }));
    drawn.push(plot(div, traces, { title, xaxis: stepAxis(all) }));
  }
  document.body.dataset.charts = String(wanted.length);
  const stats = await statsAsked;
  const box = $("#stats");
  const add = (key, title, traces, layout) => {
    let div = box.querySelector(`[data-chart="${key}"]`);
    if (!div) { div = el("div", { class: "chart", "data-chart": key }, el("div", { class: "placeholder" }, `${title}: loading chart…`)); box.append(div); }
    drawn.push(plot(div, traces, { title, ...layout }));
  };
  const causeTraces = stats.map((s, i) => ({ type: "bar", name: runs[i].name, x: Object.keys(s.causes), y: Object.values(s.causes), marker: { color: COLORS[i % COLORS.length] } }));
  add("causes", `Failures by cause (${stats.reduce((a, s) => a + Object.values(s.causes).reduce((x, y) => x + y, 0), 0)})`,
      causeTraces, { xaxis: { type: "category" } });
  if (stats.some(s => Object.keys(s.nodes || {}).length)) {  // a runtime with nodes (ray)
    add("nodes", "Episodes per node (hatched: lost to the infrastructure)", stats.flatMap((s, i) => {
      const names = Object.keys(s.nodes || {});
      return [{ type: "bar", name: runs[i].name, x: names, y: names.map(n => s.nodes[n].episodes), marker: { color: COLORS[i % COLORS.length] } },
              { type: "bar", name: `${runs[i].name} infra_error`, x: names, y: names.map(n => s.nodes[n].infra_failed), marker: { color: COLORS[i % COLORS.length], pattern: { shape: "/" } } }];
    }), { xaxis: { type: "category" } });
  }
  if (runs.some(r => r.kind === "rollouts")) {
    add("rewards", "Reward histogram", stats.map((s, i) => ({ type: "bar", name: runs[i].name, x: s.reward_histogram.edges, y: s.reward_histogram.counts, marker: { color: COLORS[i % COLORS.length] } })), { xaxis: { title: { text: "reward" } } });
    add("groups", "Rewards per group", stats.map((s, i) => ({ type: "scatter", mode: "markers", name: runs[i].name,
      x: s.groups.flatMap(g => g.rewards.map(() => g.group_id)), y: s.groups.flatMap(g => g.rewards), marker: { color: COLORS[i % COLORS.length], opacity: .6 } })), { xaxis: { type: "category", showticklabels: false, title: { text: "group" } } });
    add("latency", "Rollout latency (s)", stats.map((s, i) => ({ type: "bar", name: `${runs[i].name} p50 ${fmt(s.latency.p50, 2)} p90 ${fmt(s.latency.p90, 2)}`, x: s.latency_histogram.edges, y: s.latency_histogram.counts, marker: { color: COLORS[i % COLORS.length] } })), { xaxis: { title: { text: "seconds" } } });
  }
  document.body.dataset.ready = "overview";
  performance.mark("rollhub:overview");
  Promise.all(drawn).then(() => { performance.mark("rollhub:charts"); document.body.dataset.charted = "1"; });
}

// ---- episodes table -----------------------------------------------------------------
// infra_error: the infrastructure lost every session (not the agent's failure, never trained)
function statusClass(status) { return status === "ok" ? "st-ok" : status === "infra_error" ? "st-infra" : "st-bad"; }
function fillSelect(sel, values, label) {
  const cur = sel.value;
  sel.replaceChildren(el("option", { value: "" }, "all"), ...values.map(v => el("option", { value: v[0] }, label ? label(v) : String(v[0]))));
  sel.value = cur;
}
async function loadFacets(force) {
  const run = S.q.run;
  if (S.facetsFor === run && !force) return;
  const f = await api(`/api/runs/${run}/facets`);
  const form = $("#filters");
  fillSelect(form.step, f.steps.map(s => [s]), v => String(v[0] + 1));
  fillSelect(form.status, Object.entries(f.statuses), v => `${v[0]} (${v[1]})`);
  fillSelect(form.version, f.versions.map(v => [v]), v => `v${v[0]}`);
  fillSelect(form.turns, f.turns.map(t => [t]));
  fillSelect(form.cause, Object.entries(f.causes), v => `${v[0]} (${v[1]})`);
  fillSelect(form.split, Object.entries(f.splits || {}), v => `${v[0]} (${v[1]})`);
  form.split.closest("label").hidden = !Object.keys(f.splits || {}).length;
  fillSelect(form.node, Object.entries(f.nodes || {}), v => `${v[0]} (${v[1]})`);
  form.node.closest("label").hidden = !Object.keys(f.nodes || {}).length;
  S.facetsFor = run;
}
function queryString() {
  const form = $("#filters");
  const p = new URLSearchParams();
  for (const name of ["step", "group", "status", "reward_min", "reward_max", "version", "turns", "cause", "split", "node", "q"]) {
    const v = form.elements[name].value.trim();
    if (v) p.set(name, v);
  }
  p.set("sort", S.q.sort); if (S.q.desc) p.set("desc", "1");
  p.set("page", S.q.page); p.set("size", PAGE_SIZE);
  return p.toString();
}
async function renderEpisodes(live) {
  S.q.run = Number($("#filters").run.value || 0);
  await loadFacets(live);
  const body = await api(`/api/runs/${S.q.run}/episodes?${queryString()}`);
  const tb = $("#episodes-table tbody");
  tb.replaceChildren(...body.rows.map(r => {
    const tr = el("tr", { "data-n": r.n },
      el("td", {}, r.n), el("td", {}, r.step === null ? "–" : r.step + 1), el("td", {}, r.group_id), el("td", {}, r.sample_index),
      el("td", { class: statusClass(r.status) }, r.status), el("td", {}, fmt(r.reward)), el("td", {}, fmt(r.advantage)),
      el("td", {}, r.versions.length ? r.versions.map(v => "v" + v).join(",") : fmt(r.weight_version)), el("td", {}, r.turns), el("td", {}, r.tokens),
      el("td", {}, fmt(r.elapsed, 1)), el("td", {}, r.cause || ""), el("td", {}, r.node || ""));
    tr.addEventListener("click", () => { location.hash = `#episode/${S.q.run}/${r.n}`; });
    return tr;
  }));
  const pages = Math.max(1, Math.ceil(body.total / PAGE_SIZE));
  $("#ep-count").textContent = `${body.total} of ${body.episodes} episodes`;
  $("#page").textContent = `page ${body.page + 1} / ${pages}`;
  $("#prev").disabled = body.page === 0; $("#next").disabled = body.page + 1 >= pages;
  document.querySelectorAll("#episodes-table th").forEach(th => {
    th.classList.toggle("sorted", th.dataset.sort === S.q.sort);
    th.classList.toggle("desc", th.dataset.sort === S.q.sort && S.q.desc);
  });
  document.body.dataset.ready = "episodes";
}

// ---- one episode ----------------------------------------------------------------------
function tokenView(t, skipPrompt) {
  const frag = document.createDocumentFragment();
  const names = { p: "prompt (not trained)", s: "sampled (trained, mask 1)", e: "tool result / template (not trained, mask 0)" };
  let lastTurn = null;
  for (let i = 0; i < t.ids.length; i++) {
    const k = t.kind[i], lp = t.logprob[i];
    if (skipPrompt && k === "p") continue;
    const text = t.text ? t.text[i] : `[${t.ids[i]}]`;
    const parts = [`#${i}  id ${t.ids[i]}`, names[k]];
    if (lp !== null && lp !== undefined) parts.push(`logprob ${lp.toFixed(4)} (p ${Math.exp(lp).toFixed(3)})`);
    if (t.turn[i] !== null && t.turn[i] !== undefined) parts.push(`turn ${t.turn[i]}`);
    if (t.version[i] !== null && t.version[i] !== undefined) parts.push(`weights v${t.version[i]}`);
    const span = el("span", { class: `tok ${k}`, title: parts.join(" · "), "data-trained": k === "s" ? "1" : "0" }, text);
    if (k === "s" && lp !== null && lp !== undefined) {
      const a = Math.min(0.85, 1 - Math.exp(lp));  // the less likely, the redder
      if (a > 0.02) span.style.backgroundColor = `rgba(230, 80, 40, ${a.toFixed(3)})`;
    }
    if (k === "s" && t.turn[i] !== lastTurn) span.classList.add("turn-start");
    if (k === "s") lastTurn = t.turn[i];
    frag.append(span);
  }
  return el("div", { class: "tokens" }, frag);
}
function messages(list, ids) {
  if (!list) return el("pre", {}, `token ids: ${JSON.stringify(ids)}`);
  return list.map(m => m.role === "system"  // long and the same every time: folded
    ? el("details", { class: "msg role-system" }, el("summary", { class: "msg-role" }, `system (${m.content.length} characters)`), el("div", { class: "msg-body" }, m.content))
    : el("div", { class: `msg role-${m.role}` }, el("div", { class: "msg-role" }, m.role === "tool" ? "tool output (masked, not trained)" : m.role), el("div", { class: "msg-body" }, m.content)));
}
// a tool call as a reader expects it: a command line for a one-string argument (shell tools)
function toolCall(c) {
  if (!c.name) return el("div", { class: "call bad" }, "ill-formed tool call: ", el("code", {}, c.raw));
  const args = c.arguments || {};
  const vals = typeof args === "object" ? Object.values(args) : [args];
  const line = vals.length === 1 && typeof vals[0] === "string" ? vals[0] : JSON.stringify(args);
  return el("div", { class: "call" }, el("span", { class: "call-name" }, c.name), el("code", {}, line));
}
function traceSection(tr, ep, compact) {
  const meta = tr.metadata || {};
  const drift = meta.drift ? Object.entries(meta.drift).map(([k, v]) => `${k} ${v}`).join(", ") : "–";
  const head = tr.branch_id ? `branch ${tr.branch_id} (forked from branch ${tr.parent_branch_id} at turn ${tr.fork_turn})` : "main branch";
  const turns = tr.turns.map(t => el("div", { class: "turn" },
    el("div", { class: "turn-head" }, `turn ${t.turn_index} · weights v${fmt(t.weight_version)} · drift ${t.drift}` +
      `${t.masked_tokens ? ` (${t.masked_tokens} earlier tokens masked)` : ""} · finish ${t.finish_reason}${t.ill_formed ? " · ill-formed" : ""}`),
    compact ? null : el("div", { class: "note" }, "what the model saw (new since the last turn):"),
    compact ? null : messages(t.input_messages, t.input_ids),
    el("div", { class: "msg out" }, el("div", { class: "msg-role" }, "sampled"), el("div", { class: "msg-body" }, t.output_text !== null ? t.output_text : JSON.stringify(t.output_ids))),
    (t.tool_calls || []).length ? el("div", { class: "calls" }, el("div", { class: "msg-role" }, "tool call"), t.tool_calls.map(toolCall)) : null));
  return el("div", { class: "section trace", "data-branch": tr.branch_id },
    el("h3", {}, `${head} · ${tr.turns.length} turn(s) · finish ${tr.finish_reason} · drift: ${drift}`),
    turns,
    el("h3", {}, compact ? "response tokens the trainer received" : "tokens the trainer received"),
    el("div", { class: "legend" }, el("span", { class: "tok p" }, "prompt"), el("span", { class: "tok s" }, "sampled (trained)"),
       el("span", { class: "tok e" }, "tool result / template (masked, not trained)"),
       el("span", { class: "note" }, "shading: the redder, the less likely the sampled token; hover a token for its logprob")),
    tokenView(tr.tokens, compact));
}
// A session rollout's phases: waits for slots, setup, the agent's run, teardown (seconds).
function sessionPhases(s) {
  const parts = [["queued for setup", s.setup_wait_s], ["setup", s.setup_s], ["queued for run", s.run_wait_s],
                 ["run", s.run_s], ["teardown", s.shutdown_s]]
    .filter(([, v]) => v !== undefined && v !== null).map(([k, v]) => `${k} ${fmt(v, 2)} s`);
  if (s.shutdown_error) parts.push(`teardown failed: ${s.shutdown_error}`);
  return parts.join(" · ");
}
function episodeHeader(ep, run) {
  // an environment's own check (its exit code is the reward) sits next to the reward
  const check = ep.result && typeof ep.result === "object" && ep.result.check && typeof ep.result.check === "object" ? ep.result.check : null;
  const split = ep.payload && typeof ep.payload === "object" ? ep.payload.split : null;
  const comps = Object.entries(ep.reward_components || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
  return el("div", { class: "section" },
    el("h3", {}, `episode ${ep.episode_id}`),
    kv([["status", el("span", { class: statusClass(ep.status) }, ep.status)],
        ["step", ep.step === null || ep.step === undefined ? "–" : String(ep.step + 1)],
        ["group", el("a", { href: `#group/${run}/${ep.step === null || ep.step === undefined ? "" : ep.step}/${encodeURIComponent(ep.group_id)}` }, `${ep.group_id} (sample ${ep.sample_index}) — see the group side by side`)],
        ["reward", `${fmt(ep.reward)}${comps ? "  (" + comps + ")" : ""}`],
        check ? ["check", el("span", { class: check.exit_code === 0 ? "st-ok" : "st-bad" }, `exit ${fmt(check.exit_code)}: `, el("code", {}, String(check.output || "")))] : null,
        split ? ["split", split] : null,
        ["advantage", fmt(ep.advantage)], ["trained", ep.trained === undefined || ep.trained === null ? "–" : (ep.trained ? "yes" : "no")],
        ["weight version", fmt(ep.weight_version)], ["turns", fmt(ep.num_turns)], ["sampled tokens", fmt(ep.num_sampled_tokens)],
        ["seconds", fmt(ep.elapsed_s, 2)], ep.session ? ["session", sessionPhases(ep.session)] : null,
        ep.decoder_note ? ["tokens", ep.decoder_note] : null]),
    el("details", {}, el("summary", {}, "task and result"), el("pre", {}, JSON.stringify({ payload: ep.payload, result: ep.result, metrics: ep.metrics }, null, 2))));
}
async function renderEpisode(run, n) {
  const box = $("#view-episode");
  box.replaceChildren(el("p", { class: "note" }, "loading…"));
  const ep = await api(`/api/runs/${run}/episodes/${n}`);
  const parts = [el("p", {}, el("a", { href: "#episodes" }, "◀ episodes")), episodeHeader(ep, run)];
  if (ep.error) parts.push(el("div", { class: "section error" }, el("h3", {}, `error: ${ep.error.type || ""}`),
    el("pre", {}, ep.error.message || ""), ep.error.traceback ? el("pre", {}, ep.error.traceback) : null));
  if (!ep.traces.length) parts.push(el("p", { class: "note" }, "no token record (the episode failed before a model call, or its tokens were not kept)"));
  ep.traces.forEach(tr => parts.push(traceSection(tr, ep, false)));
  box.replaceChildren(...parts);
  document.body.dataset.ready = "episode";
  performance.mark("rollhub:episode");
}
async function renderGroup(run, step, gid) {
  const box = $("#view-group");
  box.replaceChildren(el("p", { class: "note" }, "loading…"));
  const g = await api(`/api/runs/${run}/group?${new URLSearchParams({ step, group: gid })}`);
  const eps = await Promise.all(g.episodes.map(e => api(`/api/runs/${run}/episodes/${e.n}`)));
  const cols = eps.map(ep => el("div", { class: "section", "data-n": ep.n },
    el("h3", {}, el("a", { href: `#episode/${run}/${ep.n}` }, `sample ${ep.sample_index}`), ` · ${ep.status} · reward ${fmt(ep.reward)} · advantage ${fmt(ep.advantage)}`),
    ep.error ? el("pre", { class: "st-bad" }, `${ep.error.type}: ${ep.error.message}`) : null,
    ep.traces.map(tr => traceSection(tr, ep, true))));
  box.replaceChildren(el("p", {}, el("a", { href: "#episodes" }, "◀ episodes"), ` · group ${gid} · step ${Number(step) + 1} · ${eps.length} samples`),
                      el("div", { class: "group" }, cols));
  document.body.dataset.ready = "group";
}

// ---- routing --------------------------------------------------------------------------
function currentView() { return (location.hash.slice(1).split("/")[0] || "overview"); }
async function route() {
  const [view, ...args] = location.hash.slice(1).split("/");
  const name = ["episodes", "episode", "group"].includes(view) ? view : "overview";
  document.querySelectorAll(".view").forEach(v => { v.hidden = v.id !== `view-${name}`; });
  $("#nav-overview").classList.toggle("active", name === "overview");
  $("#nav-episodes").classList.toggle("active", name !== "overview");
  delete document.body.dataset.ready;
  try {
    if (name === "overview") await renderOverview(false);
    else if (name === "episodes") await renderEpisodes(false);
    else if (name === "episode") await renderEpisode(Number(args[0]), Number(args[1]));
    else await renderGroup(Number(args[0]), args[1], decodeURIComponent(args.slice(2).join("/")));
  } catch (e) {
    $(`#view-${name}`).prepend(el("p", { class: "st-bad" }, `error: ${e.message}`));
  }
}

function wire() {
  const form = $("#filters");
  let timer = null;
  const refilter = () => { clearTimeout(timer); timer = setTimeout(() => { S.q.page = 0; renderEpisodes(false); }, 150); };
  form.addEventListener("input", refilter);
  form.addEventListener("change", (ev) => { if (ev.target.name === "run") S.facetsFor = null; refilter(); });
  form.addEventListener("reset", () => setTimeout(refilter, 0));
  form.addEventListener("submit", (ev) => ev.preventDefault());
  $("#prev").addEventListener("click", () => { S.q.page = Math.max(0, S.q.page - 1); renderEpisodes(false); });
  $("#next").addEventListener("click", () => { S.q.page += 1; renderEpisodes(false); });
  document.querySelectorAll("#episodes-table th").forEach(th => th.addEventListener("click", () => {
    if (S.q.sort === th.dataset.sort) S.q.desc = !S.q.desc; else { S.q.sort = th.dataset.sort; S.q.desc = false; }
    renderEpisodes(false);
  }));
  window.addEventListener("hashchange", route);
}

async function main() {
  wire();
  await loadRuns();
  for (const r of S.runs) S.poll[r.id] = { id: r.id, steps_done: r.steps_done, episodes: r.episodes, generation: r.generation, status: r.status };
  await route();
  setInterval(pollOnce, 2000);
}
main();

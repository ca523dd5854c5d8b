// recalld inspector: the page `recalld ui` serves. Plain JavaScript, no framework, no build
// step; every chart is SVG drawn here. It reads through the daemon's own ops, forwarded by the
// server at POST /api/<op> with the token from this page's address (kept in memory only).
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token") || "";
const STATE_COLOURS = { live: "#2e9d5b", leaving: "#e39b22", sealed: "#4a78c2", forgotten: "#a3abb5" };
const TRACE_COLOURS = { encoding: "#374151", fact: "#c2410c", restated: "#7c3aed" };
const SVGNS = "http://www.w3.org/2000/svg";

const app = { memories: [], memory: null, data: null, at: null, agent: null, facts: [] };

// ---------------------------------------------------------------------------------------------
// DOM helpers: elements are built with textContent, never from HTML strings of data.

function build(make, tag, attrs, kids) {
  const el = make(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const h = (tag, attrs, ...kids) => build((t) => document.createElement(t), tag, attrs, kids);
const s = (tag, attrs, ...kids) => build((t) => document.createElementNS(SVGNS, t), tag, attrs, kids);
const $ = (id) => document.getElementById(id);
const clear = (el) => { el.replaceChildren(); return el; };

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function call(op, args = {}) {
  let r;
  try {
    r = await fetch(`/api/${op}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
      body: JSON.stringify(args),
    });
  } catch (e) {
    throw new ApiError(0, "inspector_unreachable", `the inspector server does not answer (${e.message}); is recalld ui still running?`);
  }
  const body = await r.json().catch(() => null);
  if (!r.ok) {
    const err = (body && body.error) || {};
    throw new ApiError(r.status, err.code || `http_${r.status}`, err.message || r.statusText);
  }
  return body;
}

function banner(e) {
  const el = $("banner");
  if (!e) {
    el.hidden = true;
    return;
  }
  let text = `${e.code || "error"}: ${e.message}`;
  if (e.code === "daemon_unreachable") text = `The daemon is not running or not reachable. ${e.message}`;
  if (e.code === "unauthorized") text = "This page needs the token recalld ui printed: open the full address it printed.";
  el.textContent = text;
  el.className = e.code === "daemon_unreachable" ? "down" : "";
  el.hidden = false;
}

// Runs an action, showing its error in the banner instead of throwing.
async function guarded(fn) {
  try {
    const out = await fn();
    banner(null);
    return out;
  } catch (e) {
    banner(e);
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------
// Formatting

const pad = (n) => String(n).padStart(2, "0");
function fmtTime(t) {
  if (t === undefined || t === null) return "—";
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fmtClock(t, span) {
  const d = new Date(t * 1000);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return span > 86400 ? `${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock}` : clock;
}
function fmtNum(x, digits = 2) {
  if (x === undefined || x === null) return "—";
  if (typeof x !== "number") return String(x);
  return Number.isInteger(x) ? String(x) : x.toFixed(digits);
}
function toLocalInput(t) {
  const d = new Date(Math.round(t) * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
const fromLocalInput = (v) => (v ? new Date(v).getTime() / 1000 : null);
const stateOf = (status) => (status && typeof status === "object" ? status.state : status) || "active";
const epLabel = (n) => `E${n}`;

// Round tick steps: 1, 2, 5 × 10^k, about `count` of them over `span`.
function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  return [1, 2, 5, 10].map((m) => m * mag).find((st) => st >= raw) || mag * 10;
}

// ---------------------------------------------------------------------------------------------
// The memory list

async function loadMemories() {
  const [out, health] = await guarded(() => Promise.all([call("memories"), call("health")])) || [];
  if (!out) return;
  app.memories = (out.memories || []).sort((a, b) => (b.last_at || 0) - (a.last_at || 0));
  const list = clear($("memory-list"));
  if (!app.memories.length) list.append(h("li", { class: "muted" }, "No memories yet."));
  for (const m of app.memories) {
    list.append(
      h("li", { class: m.memory === app.memory ? "memory selected" : "memory", "data-memory": m.memory, onclick: () => pick(m.memory) },
        h("div", { class: "name" }, m.memory),
        h("div", { class: "muted small-text" },
          `${m.turns} turns · ${m.episodes} episodes · ${m.facts} facts`, h("br"),
          `last ${fmtTime(m.last_at)}`, m.agent ? ` · agent ${m.agent}` : "", m.user ? ` (${m.user})` : "")));
  }
  const agents = new Map();
  for (const m of app.memories) if (m.agent) agents.set(m.agent, m.user || "");
  const options = clear($("agent-options"));
  for (const a of agents.keys()) options.append(h("option", { value: a }));
  $("daemon").textContent = `recalld ${health.version} · up ${fmtNum(health.uptime_s / 60, 0)} min · ${app.memories.length} memories`;
}

async function pick(memory) {
  app.memory = memory;
  const m = app.memories.find((x) => x.memory === memory);
  app.at = m && m.last_at ? Math.ceil(m.last_at) : null;
  for (const li of document.querySelectorAll("#memory-list li.memory")) {
    li.classList.toggle("selected", li.dataset.memory === memory);
  }
  showTab("inspect");
  await loadInspect();
}

// ---------------------------------------------------------------------------------------------
// One memory: the inspect op

async function loadInspect() {
  if (!app.memory) return;
  const args = { memory: app.memory, decisions: 12 };
  if (app.at) args.at = app.at;
  const data = await guarded(() => call("inspect", args));
  if (!data) return;
  app.data = data;
  app.at = data.at;
  $("inspect-empty").hidden = true;
  $("inspect-body").hidden = false;
  $("memory-title").textContent = data.memory;
  const r = data.record || {};
  $("memory-summary").textContent =
    `${r.turns ?? "?"} turns · ${r.messages ?? "?"} messages · ceiling ${r.ceiling ?? "?"}${r.ceiling_source === "default" ? " (default)" : ""} · ` +
    `${data.episodes.length} episodes${data.episodes_omitted ? ` (+${data.episodes_omitted} older not shown)` : ""} · ${data.facts.length} facts`;
  $("as-of").value = toLocalInput(data.at);
  renderLegend();
  renderTimeline(data);
  renderCurves(data);
  renderLane(data.lane);
  renderDecisions(data);
  renderGraph(data);
  $("inspect-body").dataset.at = String(data.at);
}

function renderLegend() {
  const el = clear($("legend"));
  for (const st of Object.keys(STATE_COLOURS)) el.append(h("span", {}, h("i", { class: `state-${st}` }), st));
  el.append(h("span", {}, h("i", { class: "uncut" }), "not cut yet"));
  for (const kind of Object.keys(TRACE_COLOURS)) el.append(h("span", {}, h("i", { class: `dot trace-${kind}` }), `${kind} trace`));
}

// Episodes as bands over the turn axis. Two episodes may share a turn (a cut falls between a
// user message and its reply), so overlapping bands go to rows of their own.
function renderTimeline(data) {
  const W = 1000, L = 44, R = 12, top = 8, trackH = 40;
  const svg = clear($("timeline"));
  const eps = data.episodes;
  const turns = Math.max(1, data.record?.turns || 0, ...eps.map((e) => e.last_turn));
  const ends = [];
  const row = new Map();
  for (const e of [...eps].sort((a, b) => a.first_seq - b.first_seq)) {
    let r = ends.findIndex((end) => end < e.first_turn - 1 + 0.001);
    if (r < 0) r = ends.push(0) - 1;
    ends[r] = e.last_turn;
    row.set(e.n, r);
  }
  const rows = Math.max(1, ends.length), bandH = trackH / rows, H = top + trackH + 26;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const x = (t) => L + (t / turns) * (W - L - R);
  svg.append(s("text", { x: 4, y: top + trackH / 2 + 4, class: "axis-label" }, "turns"));
  svg.append(s("rect", { x: x(0), y: top, width: x(turns) - x(0), height: trackH, class: "track" }));
  const lastCut = Math.max(0, ...eps.map((e) => e.last_turn));
  if (lastCut < turns) {
    svg.append(s("rect", { x: x(lastCut), y: top, width: x(turns) - x(lastCut), height: trackH, class: "band-uncut" },
      s("title", {}, `turns ${lastCut + 1}–${turns}: not cut into an episode yet`)));
  }
  for (const e of eps) {
    const x0 = x(e.first_turn - 1), x1 = x(e.last_turn), y0 = top + row.get(e.n) * bandH;
    const g = s("g", { class: "band", "data-state": e.state, "data-episode": e.n,
      onmouseenter: () => highlight(e.n), onmouseleave: () => highlight(null) });
    g.append(s("rect", { x: x0 + 0.5, y: y0 + 0.5, width: Math.max(1, x1 - x0 - 1), height: bandH - 1, fill: STATE_COLOURS[e.state] || "#888" }));
    if (x1 - x0 > 26 && bandH >= 12) g.append(s("text", { x: (x0 + x1) / 2, y: y0 + bandH / 2 + 4, class: "band-label" }, epLabel(e.n)));
    g.append(s("title", {}, `${epLabel(e.n)} ${e.state}: turns ${e.first_turn}–${e.last_turn}, ${e.tokens} tokens, ` +
      `activation ${fmtNum(e.activation, 3)}, significance ${fmtNum(e.significance, 3)}, ${(e.facts || []).length} facts`));
    svg.append(g);
  }
  const step = niceStep(turns, 12);
  for (let t = 0; t <= turns; t += step) {
    svg.append(s("line", { x1: x(t), x2: x(t), y1: top + trackH, y2: top + trackH + 5, class: "tick" }));
    svg.append(s("text", { x: x(t), y: top + trackH + 18, class: "tick-label" }, t));
  }
}

function highlight(n) {
  for (const el of document.querySelectorAll("#curves .curve")) {
    el.classList.toggle("dim", n !== null && el.dataset.episode !== String(n));
  }
}

// Value of a sampled curve at time t (linear between samples; 0 before the first).
function curveAt(curve, t) {
  if (!curve.length || t < curve[0][0]) return 0;
  for (let i = 1; i < curve.length; i++) {
    const [t0, a0] = curve[i - 1], [t1, a1] = curve[i];
    if (t <= t1) return t1 === t0 ? a1 : a0 + ((a1 - a0) * (t - t0)) / (t1 - t0);
  }
  return curve[curve.length - 1][1];
}

// Each episode's activation over wall-clock time, traces as dots, the as-of time as a line.
function renderCurves(data) {
  const W = 1000, H = 230, L = 44, R = 44, T = 12, B = 26;
  const svg = clear($("curves"));
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const eps = data.episodes.filter((e) => (e.curve || []).length);
  if (!eps.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, class: "empty" }, "No episode has a curve yet: nothing was cut."));
    return;
  }
  const times = eps.flatMap((e) => [...e.curve.map((p) => p[0]), ...(e.traces || []).map((tr) => tr.at)]);
  const t0 = Math.min(...times), t1 = Math.max(data.at, ...times);
  const amax = Math.max(1e-6, ...eps.flatMap((e) => e.curve.map((p) => p[1])));
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
  const y = (a) => T + (1 - a / amax) * (H - T - B);
  for (const frac of [0, 0.5, 1]) {
    svg.append(s("line", { x1: L, x2: W - R, y1: y(amax * frac), y2: y(amax * frac), class: "grid" }));
    svg.append(s("text", { x: L - 6, y: y(amax * frac) + 4, class: "tick-label end" }, fmtNum(amax * frac, 2)));
  }
  const span = t1 - t0;
  for (let i = 0; i <= 5; i++) {
    const t = t0 + (span * i) / 5;
    svg.append(s("text", { x: x(t), y: H - 8, class: "tick-label" }, fmtClock(t, span)));
  }
  for (const e of eps) {
    const colour = STATE_COLOURS[e.state] || "#888";
    const d = e.curve.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    const g = s("g", { class: "curve", "data-episode": e.n, "data-state": e.state });
    g.append(s("path", { d, stroke: colour, class: "curve-line" }, s("title", {}, `${epLabel(e.n)} (${e.state})`)));
    for (const tr of e.traces || []) {
      const a = curveAt(e.curve, tr.at);
      g.append(s("circle", { cx: x(tr.at), cy: y(a), r: tr.counted === false ? 2.5 : 3.5, class: "trace",
        fill: TRACE_COLOURS[tr.kind] || "#333" },
        s("title", {}, `${epLabel(e.n)} ${tr.kind} trace at ${fmtTime(tr.at)}: score ${fmtNum(tr.score, 3)}` +
          `${tr.fact !== undefined && tr.fact !== null ? `, fact ${tr.fact}` : ""}${tr.counted === false ? " (not counted)" : ""}`)));
    }
    svg.append(g);
  }
  // Each curve's name at its end, skipping names that would overlap one already placed.
  const placed = [];
  for (const e of [...eps].sort((a, b) => b.curve[b.curve.length - 1][1] - a.curve[a.curve.length - 1][1])) {
    const last = e.curve[e.curve.length - 1];
    const ly = y(last[1]) + 4;
    if (placed.some((py) => Math.abs(py - ly) < 11)) continue;
    placed.push(ly);
    svg.append(s("text", { x: Math.min(W - R + 4, x(last[0]) + 4), y: ly, class: "curve-label", fill: STATE_COLOURS[e.state] || "#888" }, epLabel(e.n)));
  }
  svg.append(s("line", { x1: x(data.at), x2: x(data.at), y1: T, y2: H - B, class: "as-of-line" }));
  svg.append(s("text", { x: x(data.at) - 4, y: H - B - 4, class: "tick-label end as-of" }, `as of ${fmtTime(data.at)}`));
}

function renderLane(lane) {
  const el = $("lane");
  const parked = lane && Array.isArray(lane.parked) ? lane.parked : [];
  const parkedText = parked.length
    ? ` Parked after failing: ${parked.map((j) => `${j.kind} (${j.attempts} tries${j.error ? `: ${j.error}` : ""})`).join("; ")}.` : "";
  if (!lane || !lane.depth) {
    el.textContent = `Lane: idle.${parkedText}`;
    return;
  }
  const kinds = (lane.jobs || []).map((j) => `${j.kind}${j.attempts ? ` (${j.attempts} tries)` : ""}`).join(", ");
  el.textContent = `Lane: ${lane.depth} jobs waiting, the oldest ${fmtNum(lane.oldest_age_s, 0)} s: ${kinds}.${parkedText}`;
}

// ---------------------------------------------------------------------------------------------
// Decisions: each decorate's budget and what it showed

function budgetBar(d) {
  const W = 1000, H = 64, top = 16, barH = 20;
  const rec = d.recall && d.recall.tokens ? d.recall.tokens : 0;
  const max = Math.max(d.ceiling || 0, d.request_tokens || 0, (d.fixed || 0) + (d.view_tokens || 0) + (d.room || 0), 1);
  const x = (v) => 2 + (v / max) * (W - 4);
  const svg = s("svg", { class: "budget", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "budget bar" });
  const seg = (from, to, cls, title) => {
    if (to > from) svg.append(s("rect", { x: x(from), y: top, width: x(to) - x(from), height: barH, class: cls }, s("title", {}, title)));
  };
  svg.append(s("rect", { x: x(0), y: top, width: x(max) - x(0), height: barH, class: "seg-free" }));
  seg(0, d.fixed, "seg-fixed", `fixed: ${d.fixed} tokens (instructions, facts block, note ask)`);
  seg(d.fixed, d.fixed + d.view_tokens, "seg-view", `history in view: ${d.view_tokens} tokens`);
  seg(d.fixed + d.view_tokens - rec, d.fixed + d.view_tokens, "seg-recall", `recall block: ${rec} tokens`);
  seg(d.ceiling - d.room, d.ceiling, "seg-room", `room for the reply: ${d.room} tokens`);
  // Marks: the landing and the ceiling labelled below the bar, the tokens sent above it.
  const mark = (v, cls, label, above) => {
    svg.append(s("line", { x1: x(v), x2: x(v), y1: top - 4, y2: top + barH + 4, class: cls }));
    svg.append(s("text", { x: x(v), y: above ? top - 6 : top + barH + 17, class: `tick-label ${above ? "" : "end"}` }, label));
  };
  mark(d.fixed + d.landing, "mark-landing", `landing ${d.fixed + d.landing}`);
  mark(d.ceiling, "mark-ceiling", `ceiling ${d.ceiling}`);
  mark(d.request_tokens, "mark-sent", `sent ${d.request_tokens}`, true);
  return svg;
}

function chips(label, list, cls) {
  const items = Array.isArray(list) ? list : [];
  return h("span", { class: "chips" }, h("b", {}, `${label}: `),
    items.length ? items.map((n) => h("span", { class: `chip ${cls}` }, epLabel(n))) : h("span", { class: "muted" }, "none"));
}

function renderDecisions(data) {
  const el = clear($("decisions"));
  el.append(h("div", { class: "legend" },
    h("span", {}, h("i", { class: "seg-fixed" }), "fixed (instructions, facts block, note ask)"),
    h("span", {}, h("i", { class: "seg-view" }), "history in view"),
    h("span", {}, h("i", { class: "seg-recall" }), "recall block"),
    h("span", {}, h("i", { class: "seg-room" }), "room for the reply"),
    h("span", {}, h("i", { class: "mark-landing" }), "landing (the fade's target)"),
    h("span", {}, h("i", { class: "mark-ceiling" }), "ceiling"),
    h("span", {}, h("i", { class: "mark-sent" }), "tokens sent")));
  const list = [...(data.decisions || [])].reverse();
  if (!list.length) el.append(h("p", { class: "muted" }, "No decorate recorded yet."));
  const factText = new Map(data.facts.map((f) => [f.n, f.note]));
  for (const [i, d] of list.entries()) {
    const tags = [];
    if (d.note_ask) tags.push(h("span", { class: "tag ask" }, "note ask"));
    if (d.cut) tags.push(h("span", { class: "tag" }, `cut: ${d.cut.episodes ?? ""} episodes`));
    if (d.sleep) tags.push(h("span", { class: "tag" }, "after a sleep"));
    const card = h("details", { class: "decision", open: i < 3 },
      h("summary", { class: "decision-head" },
        h("b", {}, `turn ${d.turn}`), ` · ${fmtTime(d.at)}${d.seq !== null && d.seq !== undefined ? ` · seq ${d.seq}` : ""} · request ${d.request_tokens} of ${d.ceiling} tokens ` +
        `(fixed ${d.fixed}, history ${d.view_tokens} of a ${d.budget} budget, room ${d.room})`, ...tags),
      budgetBar(d),
      h("div", { class: "chip-row" },
        chips("in view", d.in_view, "live"), chips("started leaving", d.leaving, "leaving"),
        chips("faded", d.faded, "faded"), chips("forgotten", d.forgotten, "forgotten"),
        chips("hidden for the ceiling", d.hidden_for_ceiling, "hidden"), chips("hidden for recall", d.hidden_for_recall, "hidden")));
    card.append(recallBlock(d.recall, factText));
    el.append(card);
  }
}

function recallBlock(r, factText) {
  if (!r) return h("p", { class: "muted small-text" }, "No recall (no new user message, or nothing to search).");
  const ms = typeof r.ms === "object" && r.ms ? r.ms.total : r.ms;
  const box = h("div", { class: "recall" },
    h("div", {}, h("b", {}, "Recall: "),
      `${r.tokens} tokens, best cosine ${fmtNum(r.best_cosine, 3)}, ${r.relevant ? "relevant by meaning" : "not relevant by meaning"}` +
      `${ms !== undefined ? `, ${fmtNum(ms, 1)} ms` : ""}`));
  const items = r.items || [];
  if (!items.length) {
    box.append(h("div", { class: "muted small-text" }, "Nothing found fitted the block."));
    return box;
  }
  box.append(h("table", { class: "table compact" },
    h("thead", {}, h("tr", {}, ["item", "score", "found by", "cosine", "turns", "text"].map((c) => h("th", {}, c)))),
    h("tbody", {}, items.map((it) => h("tr", { class: "recall-item" },
      h("td", {}, `${it.kind} ${it.n}`), h("td", {}, fmtNum(it.score, 4)),
      h("td", {}, (it.searches || []).join(", ")), h("td", {}, fmtNum(it.cosine, 3)),
      h("td", {}, Array.isArray(it.turns) ? it.turns.join("–") : "—"),
      h("td", { class: "text-cell" }, it.kind === "fact" ? factText.get(it.n) || "" : "excerpt of the conversation"))))));
  return box;
}

// ---------------------------------------------------------------------------------------------
// The knowledge graph: entities as nodes, facts as edges, a small force layout

function layout(nodes, links, W, H) {
  const n = nodes.length;
  const pos = nodes.map((_, i) => {
    const a = (2 * Math.PI * i) / Math.max(1, n);
    return { x: W / 2 + (W / 3) * Math.cos(a), y: H / 2 + (H / 3) * Math.sin(a) };
  });
  if (n > 150) return pos; // a circle is readable enough, and the force is O(n²)
  const k = Math.sqrt((W * H) / Math.max(1, n)) * 0.6;
  let temp = W / 8;
  for (let it = 0; it < 250; it++) {
    const disp = pos.map(() => ({ x: 0, y: 0 }));
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const dx = pos[i].x - pos[j].x, dy = pos[i].y - pos[j].y;
        const d = Math.max(0.01, Math.hypot(dx, dy)), f = (k * k) / d;
        disp[i].x += (dx / d) * f; disp[i].y += (dy / d) * f;
        disp[j].x -= (dx / d) * f; disp[j].y -= (dy / d) * f;
      }
    }
    for (const [a, b] of links) {
      if (a === b) continue;
      const dx = pos[a].x - pos[b].x, dy = pos[a].y - pos[b].y;
      const d = Math.max(0.01, Math.hypot(dx, dy)), f = (d * d) / k;
      disp[a].x -= (dx / d) * f; disp[a].y -= (dy / d) * f;
      disp[b].x += (dx / d) * f; disp[b].y += (dy / d) * f;
    }
    for (let i = 0; i < n; i++) {
      // Gravity towards the centre keeps separate components on the canvas, not in its corners.
      disp[i].x += (W / 2 - pos[i].x) * 0.5;
      disp[i].y += (H / 2 - pos[i].y) * 0.5;
      const d = Math.max(0.01, Math.hypot(disp[i].x, disp[i].y));
      pos[i].x = Math.min(W - 60, Math.max(60, pos[i].x + (disp[i].x / d) * Math.min(d, temp)));
      pos[i].y = Math.min(H - 24, Math.max(24, pos[i].y + (disp[i].y / d) * Math.min(d, temp)));
    }
    temp *= 0.98;
  }
  return pos;
}

function renderGraph(data) {
  const W = 720, H = 460;
  const svg = clear($("graph"));
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const entities = data.entities || [];
  const index = new Map(entities.map((e, i) => [e.n, i]));
  const facts = new Map(data.facts.map((f) => [f.n, f]));
  const edges = (data.edges || []).filter((e) => index.has(e.subject) && index.has(e.object) && facts.has(e.fact));
  const withEdge = new Set(edges.map((e) => e.fact));
  // A fact naming only its subject's entity hangs off it as a stub.
  const stubs = data.facts.filter((f) => !withEdge.has(f.n) && index.has(f.subject_entity));
  if (!entities.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, class: "empty" }, "No entities yet: the graph grows from the notes' subjects and objects."));
    return;
  }
  const links = edges.map((e) => [index.get(e.subject), index.get(e.object)]);
  const pos = layout(entities, links, W, H);
  const degree = entities.map(() => 0);
  for (const [a, b] of links) { degree[a]++; degree[b]++; }
  for (const f of stubs) degree[index.get(f.subject_entity)]++;

  const pairs = new Map();
  const layer = s("g", { class: "edges" });
  for (const e of edges) {
    const a = index.get(e.subject), b = index.get(e.object), f = facts.get(e.fact);
    const key = a < b ? `${a}-${b}` : `${b}-${a}`;
    const k = pairs.get(key) || 0;
    pairs.set(key, k + 1);
    const p = pos[a], q = pos[b];
    let d;
    if (a === b) {
      d = `M${p.x},${p.y} c ${28 + k * 10},${-36 - k * 12} ${56 + k * 14},${-6} 0,0`;
    } else {
      const off = (k % 2 ? 1 : -1) * Math.ceil(k / 2) * 22;
      const len = Math.max(1, Math.hypot(q.x - p.x, q.y - p.y));
      const cx = (p.x + q.x) / 2 + (-(q.y - p.y) / len) * off, cy = (p.y + q.y) / 2 + ((q.x - p.x) / len) * off;
      d = `M${p.x.toFixed(1)},${p.y.toFixed(1)} Q${cx.toFixed(1)},${cy.toFixed(1)} ${q.x.toFixed(1)},${q.y.toFixed(1)}`;
    }
    layer.append(factEdge(d, f));
  }
  stubs.forEach((f, i) => {
    const p = pos[index.get(f.subject_entity)];
    const a = (i * 2.4) % (2 * Math.PI);
    const ex = p.x + 34 * Math.cos(a), ey = p.y + 34 * Math.sin(a);
    layer.append(factEdge(`M${p.x.toFixed(1)},${p.y.toFixed(1)} L${ex.toFixed(1)},${ey.toFixed(1)}`, f, [ex, ey]));
  });
  svg.append(layer);
  entities.forEach((e, i) => {
    const r = 5 + Math.sqrt(degree[i]) * 2;
    svg.append(s("g", { class: "node", "data-entity": e.n },
      s("circle", { cx: pos[i].x, cy: pos[i].y, r }),
      s("text", { x: pos[i].x + r + 3, y: pos[i].y + 4 }, e.name),
      s("title", {}, `${e.name}${(e.aliases || []).length ? ` (also: ${e.aliases.join(", ")})` : ""}`)));
  });
}

// One fact as an edge: the drawn line, and a wide invisible line over it that takes the click.
function factEdge(d, f, end) {
  const st = stateOf(f.status);
  const g = s("g", { class: `fact-edge ${st}`, "data-fact": f.n, onclick: () => showFact(f) });
  g.append(s("path", { d, class: "edge-line" }));
  if (end) g.append(s("circle", { cx: end[0], cy: end[1], r: 3, class: "stub-end" }));
  g.append(s("path", { d, class: "edge-hit" }, s("title", {}, `fact ${f.n} (${st}): ${f.note}`)));
  return g;
}

async function showFact(f) {
  for (const el of document.querySelectorAll("#graph .fact-edge")) el.classList.toggle("selected", el.dataset.fact === String(f.n));
  const panel = clear($("fact-panel"));
  const st = f.status || {};
  let status = stateOf(st);
  if (st.state === "merged") status += ` into fact ${st.into}`;
  if (st.state === "retired") status += ` by fact ${st.by}`;
  if (st.at) status += ` at ${fmtTime(st.at)}`;
  panel.append(
    h("h4", {}, `Fact ${f.n}`),
    h("p", { class: "fact-note" }, f.note),
    h("dl", {},
      h("dt", {}, "subject → object"), h("dd", {}, `${f.subject || "—"} → ${f.object || "—"}`),
      h("dt", {}, "status"), h("dd", {}, status),
      h("dt", {}, "turns"), h("dd", {}, `${f.first_turn}–${f.last_turn}`),
      h("dt", {}, "episodes"), h("dd", {}, (f.episodes || []).map(epLabel).join(", ") || "—"),
      h("dt", {}, "recorded"), h("dd", {}, fmtTime(f.at)),
      h("dt", {}, "activation"), h("dd", {}, fmtNum(f.activation, 3))),
    h("h4", {}, "Source turns"));
  const box = h("div", { id: "source-turns" }, h("p", { class: "muted" }, "Loading…"));
  panel.append(box);
  const out = await guarded(() => call("inspect", { memory: app.memory, at: app.at, turns: [f.first_turn, f.last_turn] }));
  clear(box);
  if (!out) return;
  // Note calls are stored as messages of their own (hidden from the model); the turns' words are the rest.
  const messages = (out.messages || []).filter((m) => !m.note);
  if (!messages.length) box.append(h("p", { class: "muted" }, "No stored messages in those turns."));
  for (const m of messages) {
    box.append(h("div", { class: `message ${m.role}${m.superseded ? " superseded" : ""}` },
      h("div", { class: "message-head" }, `turn ${m.turn} · ${m.role} · seq ${m.seq}${m.episode !== null && m.episode !== undefined ? ` · ${epLabel(m.episode)}` : ""}${m.superseded ? " · superseded" : ""}`),
      h("div", { class: "message-text" }, m.text + (m.truncated ? " …" : ""))));
  }
}

// ---------------------------------------------------------------------------------------------
// The Memory tab of an agent (seed 002): its scope facts through the scope ops

function scopeArgs(extra = {}) {
  const args = { agent: app.agent.agent, ...extra };
  if (app.agent.user) args.user = app.agent.user;
  return args;
}

async function openAgent() {
  const agent = $("agent-id").value.trim();
  if (!agent) return;
  let user = $("agent-user").value.trim();
  if (!user) {
    const m = app.memories.find((x) => x.agent === agent && x.user);
    if (m) {
      user = m.user;
      $("agent-user").value = user;
    }
  }
  app.agent = { agent, user };
  $("agent-body").hidden = false;
  clear($("fact-detail")).append(h("p", { class: "muted" }, "Open a memory to see its sources, what replaced it, and to edit it."));
  $("consolidate-report").hidden = true;
  await Promise.all([loadDoctor(), loadFacts(), loadAudit()]);
}

const modelLine = (name, m) =>
  typeof m === "object" && m ? `${name} ${m.ok ? "ok" : "failing"}${m.model || m.name ? ` (${m.model || m.name})` : ""}` : `${name} ${m}`;

async function loadDoctor() {
  const d = await guarded(() => call("doctor", scopeArgs()));
  if (!d) return;
  const sweep = d.sweep || {};
  $("readiness").textContent =
    `${d.ready ? "Ready" : "Not fully working"} · memory ${d.memory} · policy ${d.policy} · sharing ${d.sharing} · ` +
    `sweep ${sweep.mode}${sweep.last ? `, last ${fmtTime(sweep.last)}` : ", never run"}${sweep.overdue ? " (overdue)" : ""} · ` +
    `${modelLine("embedder", d.embedder)} · ${modelLine("judge", d.judge)} · ` +
    `${d.facts?.active ?? 0} active, ${d.facts?.archived ?? 0} archived`;
  $("readiness").className = `readiness ${d.ready ? "ok" : "bad"}`;
  const problems = clear($("problems"));
  for (const p of d.problems || []) problems.append(h("li", {}, p));
}

async function loadFacts() {
  const query = $("fact-query").value.trim();
  const kind = $("fact-kind").value, tier = $("fact-tier").value, status = $("fact-status").value;
  let facts;
  if (query) {
    const out = await guarded(() => call("search_memories", scopeArgs({ query, limit: 50 })));
    if (!out) return;
    facts = (out.memories || []).filter((f) => (!kind || f.kind === kind) && (!tier || f.tier === tier));
  } else {
    const args = scopeArgs({ status, limit: 500 });
    if (kind) args.kind = kind;
    if (tier) args.tier = tier;
    const out = await guarded(() => call("list_memories", args));
    if (!out) return;
    facts = out.memories || [];
  }
  app.facts = facts;
  $("clear-facts").textContent = tier ? `Clear all ${tier}` : "Clear all";
  $("facts-count").textContent = `${facts.length} ${query ? "found" : "listed"}`;
  const body = clear(document.querySelector("#facts tbody"));
  if (!facts.length) body.append(h("tr", {}, h("td", { colspan: 10, class: "muted" }, "No memories here.")));
  for (const f of facts) {
    const st = stateOf(f.status);
    const importance = f.importance_now ?? f.importance;
    body.append(h("tr", { class: `fact-row ${st}`, "data-id": f.id },
      h("td", {}, h("input", { type: "checkbox", class: "pick", "data-id": f.id })),
      h("td", { class: "text-cell" }, h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); observe(f.id); } }, f.text)),
      h("td", {}, f.tier), h("td", {}, f.kind), h("td", {}, fmtNum(importance, 2)), h("td", {}, f.uses ?? 0),
      h("td", {}, f.last_used ? fmtTime(f.last_used) : "never"), h("td", { class: "nowrap" }, `${fmtNum(f.age_days, 1)} d`),
      h("td", {}, st),
      h("td", { class: "actions" },
        st === "archived" ? h("button", { class: "small", onclick: () => restore(f.id) }, "Restore") : null,
        h("button", { class: "small", onclick: () => observe(f.id, true) }, "Edit"),
        h("button", { class: "small danger", onclick: () => remove([f.id]) }, "Delete"))));
  }
}

async function observe(id, editing = false) {
  const f = await guarded(() => call("observe_memory", scopeArgs({ id })));
  if (!f) return;
  const panel = clear($("fact-detail"));
  const decay = f.decay || {};
  const line = (label, value) => [h("dt", {}, label), h("dd", {}, value ?? "—")];
  panel.append(
    h("h4", {}, `Memory ${f.id} · ${f.tier} ${f.kind}`),
    h("p", { class: "fact-note" }, f.text),
    h("dl", {},
      line("status", stateOf(f.status) + (f.status?.by !== undefined ? ` by ${f.status.by}` : "")),
      line("importance now", fmtNum(f.importance_now, 3)),
      line("uses", `${f.uses ?? 0}, last ${f.last_used ? fmtTime(f.last_used) : "never"}`),
      line("age", `${fmtNum(f.age_days, 1)} days (recorded ${fmtTime(f.at)})`),
      line("owner", f.owner || "nobody (shared)"),
      line("from", f.origin ? `memory ${f.origin.memory}, fact ${f.origin.fact ?? "—"}` : "—"),
      line("confidence", fmtNum(f.confidence, 2)),
      line("decay", `${decay.class ?? "?"}: freshness ${fmtNum(decay.freshness, 2)}, keep ${fmtNum(decay.keep, 2)}, ` +
        `salience ${fmtNum(decay.salience, 2)}, half-life ${fmtNum(decay.schedule_days, 0)} d`)));
  const sources = f.source_facts || [];
  if (sources.length) {
    panel.append(h("h4", {}, `Distilled from ${sources.length} sources`),
      h("ul", { class: "sources" }, sources.map((src) => h("li", {}, h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); observe(src.id); } },
        `#${src.id}`), ` ${src.text} `, h("span", { class: "muted" }, `(${stateOf(src.status)})`)))));
  }
  if (f.replaced_by) {
    const by = f.replaced_by;
    panel.append(h("h4", {}, "Replaced by"),
      h("p", {}, h("a", { href: "#", onclick: (ev) => { ev.preventDefault(); observe(by.id); } }, `#${by.id}`), ` ${by.text || ""}`));
  }
  const text = h("textarea", { rows: 4, id: "edit-text" });
  text.value = f.text;
  const kind = h("select", { id: "edit-kind" },
    ["preference", "decision", "environment", "outcome", "open_question", "fact"].map((k) => h("option", { value: k, selected: k === f.kind }, k)));
  const imp = h("input", { type: "number", step: "0.05", min: "0", max: "1", id: "edit-importance", placeholder: "importance" });
  const form = h("div", { class: "edit" }, h("h4", {}, "Edit"), text, h("div", {}, kind, " ", imp, " ",
    h("button", { onclick: () => update(f, text.value, kind.value, imp.value) }, "Save")));
  panel.append(form);
  if (editing) text.focus();
}

async function update(f, text, kind, importance) {
  const change = {};
  if (text !== f.text) change.text = text;
  if (kind !== f.kind) change.kind = kind;
  if (importance !== "") change.importance = Number(importance);
  if (!Object.keys(change).length) return;
  if (await guarded(() => call("update_memory", scopeArgs({ id: f.id, ...change })))) {
    await Promise.all([observe(f.id), loadFacts(), loadAudit()]);
  }
}

async function restore(id) {
  if (await guarded(() => call("restore", scopeArgs({ id })))) await Promise.all([loadFacts(), loadAudit(), loadDoctor()]);
}

async function remove(ids) {
  if (!ids.length) return;
  const what = ids.length === 1 ? `memory #${ids[0]}` : `${ids.length} memories`;
  if (!confirm(`Delete ${what} of agent ${app.agent.agent}, and every fact distilled from it?`)) return;
  const removed = [];
  for (const id of ids) {
    const out = await guarded(() => call("delete_memory", scopeArgs({ id })));
    if (out) removed.push(...(out.removed || []));
  }
  showReport(`Deleted: ${removed.map((n) => `#${n}`).join(", ") || "nothing"}.`);
  await Promise.all([loadFacts(), loadAudit(), loadDoctor()]);
}

async function clearFacts() {
  const tier = $("fact-tier").value;
  const what = tier ? `every ${tier} memory` : "every memory";
  if (!confirm(`Clear ${what} of agent ${app.agent.agent} that you can see? This cannot be undone.`)) return;
  const out = await guarded(() => call("clear_memories", scopeArgs(tier ? { tier } : {})));
  if (out) showReport(`Cleared ${(out.removed || []).length} memories.`);
  await Promise.all([loadFacts(), loadAudit(), loadDoctor()]);
}

async function consolidate() {
  const out = await guarded(() => call("consolidate", scopeArgs()));
  if (!out) return;
  const count = (v) => (Array.isArray(v) ? v.length : v ?? 0);
  const lines = [];
  for (const [owner, r] of Object.entries(out.owners || {})) {
    const distilled = (r.distilled || []).map((d) => `#${d.id} from ${(d.sources || []).map((x) => `#${x}`).join(", ")}`);
    const pairs = r.pairs && typeof r.pairs === "object" ? r.pairs : {};
    const proc = r.procedures || {};
    lines.push(`${owner || "ownerless facts"}: ${distilled.length ? `distilled ${distilled.join("; ")}` : "nothing distilled"}; ` +
      `${count(r.joined)} joined a semantic fact; pairs judged ${count(r.pairs_judged)}, remembered ${count(pairs.pairs_remembered)}, ` +
      `deferred ${count(pairs.pairs_deferred)}; procedures found ${count(proc.found)}, updated ${count(proc.updated)}, ` +
      `replaced ${count(proc.replaced)}${r.note ? ` (${r.note})` : ""}`);
  }
  showReport(["Consolidated.", ...(lines.length ? lines : ["No facts of yours to consolidate."])]);
  await Promise.all([loadFacts(), loadAudit()]);
}

function showReport(lines) {
  const el = clear($("consolidate-report"));
  for (const l of [].concat(lines)) el.append(h("div", {}, l));
  el.hidden = false;
}

async function loadAudit() {
  const out = await guarded(() => call("audit", scopeArgs({ limit: 200 })));
  if (!out) return;
  const body = clear(document.querySelector("#audit tbody"));
  const entries = [...(out.entries || [])].reverse();
  if (!entries.length) body.append(h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Nothing audited yet.")));
  for (const e of entries) {
    const detail = e.detail && Object.keys(e.detail).length ? JSON.stringify(e.detail) : "";
    body.append(h("tr", { class: "audit-row" },
      h("td", {}, fmtTime(e.at)), h("td", {}, e.action), h("td", {}, e.memory || "—"), h("td", {}, e.user || "—"),
      h("td", {}, (e.items || []).map((n) => `#${n}`).join(", ")), h("td", { class: "text-cell detail" }, detail.slice(0, 200))));
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring

function showTab(name) {
  for (const b of document.querySelectorAll("nav .tab")) b.classList.toggle("active", b.dataset.tab === name);
  $("view-inspect").hidden = name !== "inspect";
  $("view-agent").hidden = name !== "agent";
}

function init() {
  for (const b of document.querySelectorAll("nav .tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  $("reload-memories").addEventListener("click", loadMemories);
  $("as-of").addEventListener("change", () => {
    const t = fromLocalInput($("as-of").value);
    if (t) { app.at = t; loadInspect(); }
  });
  $("as-of-last").addEventListener("click", () => {
    const m = app.memories.find((x) => x.memory === app.memory);
    if (m) { app.at = Math.ceil(m.last_at); loadInspect(); }
  });
  $("as-of-now").addEventListener("click", () => { app.at = Math.ceil(Date.now() / 1000); loadInspect(); });
  $("agent-open").addEventListener("click", openAgent);
  $("agent-id").addEventListener("keydown", (e) => { if (e.key === "Enter") openAgent(); });
  $("fact-search").addEventListener("click", loadFacts);
  $("fact-query").addEventListener("keydown", (e) => { if (e.key === "Enter") loadFacts(); });
  for (const id of ["fact-kind", "fact-tier", "fact-status"]) $(id).addEventListener("change", loadFacts);
  $("delete-selected").addEventListener("click", () =>
    remove([...document.querySelectorAll("#facts input.pick:checked")].map((c) => Number(c.dataset.id))));
  $("clear-facts").addEventListener("click", clearFacts);
  $("consolidate").addEventListener("click", consolidate);
  $("audit-reload").addEventListener("click", loadAudit);
  if (!TOKEN) {
    banner({ code: "unauthorized", message: "" });
    return;
  }
  loadMemories();
}

init();

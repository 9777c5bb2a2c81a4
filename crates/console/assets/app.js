// Calliper console: the call search and one call in full, from the JSON
// API. Every value from the API reaches the page as text (textContent or
// an SVG text node), never as markup: SIP messages come from anyone.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

// Characters that act instead of showing (controls) or that reorder or
// hide their neighbours (bidirectional and zero-width formatting): the
// set of calliper_record::text::invisible, less tab and line ends, which a
// page shows harmlessly (a raw SIP message keeps its lines).
const INVISIBLE = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\u{1d173}-\u{1d17a}\u{e0000}-\u{e0fff}]/gu;

// Text from the wire as it is: invisible characters as \u{...} escapes,
// so "alice\u202emoc.knab" cannot read as a bank's name.
function visible(s) {
  return s.replace(INVISIBLE, (c) => "\\u{" + c.codePointAt(0).toString(16) + "}");
}

// An element with attributes and children (strings become text nodes).
// Every string, attribute or child, is made visible: nothing from the
// wire reaches the page otherwise.
function el(tag, attrs, ...children) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick" || k === "onchange" || k === "onsubmit") e.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) e.setAttribute(k, typeof v === "string" ? visible(v) : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? document.createTextNode(visible(String(c))) : c);
  }
  return e;
}

// Each navigation's number. A page takes `onThisPage()` as it starts and
// asks it after every wait: an answer that comes after the user has gone
// to another page must not draw on that page or start its timers.
let navigation = 0;
function onThisPage() {
  const page = navigation;
  return () => page === navigation;
}

function show(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
}

async function api(path) {
  // From the origin, not the page's URL: a URL carrying user:token@ cannot be fetched.
  const r = await fetch(location.origin + path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// The API's answer at `path`, or null after showing its error in `status`
// (for the pages whose status line says what they are loading).
async function apiShown(status, path) {
  try {
    return await api(path);
  } catch (e) {
    status.textContent = "Error: " + visible(e.message);
    status.className = "error";
    return null;
  }
}

// A time in ns from the API as a BigInt, or null when it is not one (a
// database from elsewhere may hold anything in any column).
function nsOf(v) {
  return typeof v === "number" && Number.isFinite(v) ? BigInt(Math.trunc(v)) : null;
}
// Ms since the epoch as "YYYY-MM-DD HH:MM:SS.mmm", "" outside Date's range.
function isoMs(ms) {
  const d = new Date(ms);
  return isNaN(d) ? "" : d.toISOString().replace("T", " ").replace("Z", "");
}
function time(ns) {
  const n = nsOf(ns);
  return n === null ? "" : isoMs(Number(n / 1000000n));
}
function num(v, digits) {
  return v === null || v === undefined ? "" : Number(v).toFixed(digits);
}
function seconds(ms) {
  return ms === null || ms === undefined ? "" : (ms / 1000).toFixed(1) + " s";
}

// ---- Search -------------------------------------------------------------

const FIELDS = [
  ["from", "From (UTC)", "2026-11-24T10:00:00Z"],
  ["to", "To (UTC)", ""],
  ["caller", "Caller", "alice*"],
  ["callee", "Callee", ""],
  ["ip", "IP or network", "10.0.0.0/8"],
  ["status", "Status", "486, 4xx, none"],
  ["state", "State", "completed, failed…"],
  ["codec", "Codec", "PCMU"],
  ["mos_below", "MOS below", ""],
  ["loss_above", "Loss above %", ""],
  ["min_duration", "Min duration s", ""],
  ["max_duration", "Max duration s", ""],
  ["user_agent", "User-Agent", ""],
  ["call_id", "Call-ID", ""],
  ["label", "Rule label", ""],
  ["alert", "Alert", "low_mos"],
  ["probe", "Probe", "site-a"],
];
const SORTS = ["time", "duration", "mos", "setup_delay", "status"];

async function searchPage(params) {
  const here = onThisPage();
  const form = el("form", { id: "search", class: "search" });
  // Over ClickHouse: calls of many probes (a probe filter).
  const central = parts && parts.store === "clickhouse";
  for (const [name, label, hint] of FIELDS) {
    if (name === "probe" && !central) continue;
    form.append(el("label", {}, label, el("input", { name, value: params.get(name) || "", placeholder: hint })));
  }
  const sort = el("select", { name: "sort" }, SORTS.map((s) => el("option", { value: s }, s)));
  sort.value = params.get("sort") || "time";
  const order = el("select", { name: "order" }, el("option", { value: "desc" }, "newest / largest first"), el("option", { value: "asc" }, "oldest / smallest first"));
  order.value = params.get("order") || "desc";
  form.append(el("label", {}, "Sort", sort), el("label", {}, "Order", order), el("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim() !== "") p.set(k, String(v).trim());
    if (p.get("sort") === "time") p.delete("sort");
    if (p.get("order") === "desc") p.delete("order");
    location.hash = "#/calls?" + p.toString();
  });
  const status = el("p", { id: "status" }, "Searching…");
  show(el("h1", {}, "Calls"), form, status);
  const body = await apiShown(status, "/api/calls?" + params.toString());
  if (!body || !here()) return;
  const limit = body.limit, offset = body.offset;
  const clip = (text) => el("td", { class: "clip", title: text }, text);
  const rows = body.calls.map((c) =>
    el("tr", { "data-id": c.id, class: "call", onclick: () => (location.hash = "#/call/" + c.id) },
      el("td", {}, el("a", { href: "#/call/" + c.id }, time(c.invite_ns))),
      central ? clip(c.probe || "") : null,
      clip(c.from_user || c.from_uri || ""),
      clip(c.to_user || c.to_uri || ""),
      clip(c.call_id || ""),
      c.caller_ip ? el("td", { class: "clip", title: `${c.caller_ip} → ${c.callee_ip || "?"}` }, c.caller_ip, el("br"), `→ ${c.callee_ip || "?"}`) : el("td"),
      el("td", {}, words(c.state)),
      el("td", {}, c.final_status ?? ""),
      el("td", { class: "n" }, c.answer_ns === null || c.answer_ns === undefined ? "" : seconds(c.duration_ms)),
      clip(c.codecs || ""),
      el("td", { class: "n " + mosClass(c.worst_mos) }, num(c.worst_mos, 2)),
      el("td", { class: "n" }, num(c.worst_loss_percent, 1)),
      el("td", { class: "n" }, num(c.setup_delay_ms, 1)),
    ));
  const table = el("table", { id: "calls" },
    el("thead", {}, el("tr", {}, ["Time (UTC)", central ? "Probe" : null, "Caller", "Callee", "Call-ID", "Signalling", "State", "Status", "Duration", "Codecs", "MOS", "Loss %", "SRD ms"].filter((h) => h !== null).map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
  const page = (o) => { const p = new URLSearchParams(params); p.set("offset", String(o)); if (o === 0) p.delete("offset"); return "#/calls?" + p.toString(); };
  const csv = new URLSearchParams(params); csv.delete("limit"); csv.delete("offset");
  status.textContent = body.calls.length === 0 ? "No calls match." : `Calls ${offset + 1}–${offset + body.calls.length}${body.more ? " (more follow)" : ""}`;
  const nav = el("p", { class: "pages" },
    offset > 0 ? el("a", { href: page(Math.max(0, offset - limit)), id: "prev" }, "← previous page") : null, " ",
    body.more ? el("a", { href: page(offset + limit), id: "next" }, "next page →") : null, " ",
    el("a", { href: "/api/calls.csv?" + csv.toString(), id: "csv" }, "CSV of this search"));
  document.getElementById("main").append(table, nav);
}

function mosClass(m) {
  if (m === null || m === undefined) return "";
  return m < 3.1 ? "bad" : m < 3.6 ? "fair" : "good";
}


// Human words for the API's enum names (states, directions, reasons).
const WORDS = {
  completed: "completed", answered: "answered, no BYE seen", failed: "failed", cancelled: "cancelled",
  no_final_response: "no final response", evicted: "evicted (call table full)",
  caller_to_callee: "caller → callee", callee_to_caller: "callee → caller", unknown: "not tied to a side",
  not_voice: "not a voice stream", too_short: "too short to score", no_codec_value: "no E-model value for this codec",
};
function words(v) {
  return v === null || v === undefined ? "" : WORDS[v] ?? String(v).replaceAll("_", " ");
}

// A line chart of rows over time; `marks` (ms since the epoch) are drawn
// as dashed vertical lines (a stream's sequence restarts).
function chart(title, rows, value, min, max, kind, marks) {
  const w = 300, h = 130, pad = 30;
  const pts = rows.map((r) => [nsOf(r.start_ns), value(r)]).filter(([t, v]) => t !== null && typeof v === "number" && Number.isFinite(v))
    .map(([t, v]) => [Number(t / 1000000n), v]);
  const svg = el("svg:svg", { class: "chart", "data-kind": kind, "data-points": pts.length, width: w, height: h, viewBox: `0 0 ${w} ${h}` });
  svg.append(el("svg:text", { x: pad, y: 12, class: "title" }, title));
  if (pts.length === 0) return svg;
  const t0 = Math.min(pts[0][0], ...(marks || [])), t1 = Math.max(pts[pts.length - 1][0], t0 + 1, ...(marks || []));
  const hi = max ?? Math.max(1, ...pts.map(([, v]) => v)), lo = min;
  const X = (t) => pad + ((t - t0) / (t1 - t0)) * (w - pad - 8);
  const Y = (v) => h - 28 - ((v - lo) / (hi - lo || 1)) * (h - 50);
  // Time of day within a day; the date beyond.
  const clock = (ms) => isoMs(ms).slice(t1 - t0 > 86400000 ? 0 : 11, t1 - t0 > 86400000 ? 10 : 19);
  svg.append(
    el("svg:line", { x1: pad, y1: h - 28, x2: w - 8, y2: h - 28, class: "axis" }),
    el("svg:text", { x: pad, y: h - 14, class: "tick" }, clock(t0)),
    el("svg:text", { x: w - 8, y: h - 14, class: "tick", "text-anchor": "end" }, clock(t1)),
    el("svg:text", { x: 2, y: Y(hi) + 4, class: "tick" }, String(Math.round(hi * 10) / 10)),
    el("svg:text", { x: 2, y: Y(lo) + 4, class: "tick" }, String(lo)),
    el("svg:polyline", { points: pts.map(([t, v]) => `${X(t).toFixed(1)},${Y(v).toFixed(1)}`).join(" ") }));
  for (const m of marks || []) {
    svg.append(el("svg:line", { x1: X(m).toFixed(1), y1: 16, x2: X(m).toFixed(1), y2: h - 28, class: "restart", "data-ms": m },
      el("svg:title", {}, `sequence restart at ${clock(m)}: jitter spans it in the tshark figure`)));
  }
  for (const [t, v] of pts) svg.append(el("svg:circle", { cx: X(t).toFixed(1), cy: Y(v).toFixed(1), r: 2.5, "data-value": v }, el("svg:title", {}, `${clock(t)}: ${Number(v).toFixed(2)}`)));
  return svg;
}

// ---- Stored lists: alerts, registrations, KPIs -------------------------------

// A filter form whose values go into the page's URL (shareable).
function filterForm(route, fields, params, extra) {
  const form = el("form", { class: "search" });
  for (const [name, label, hint] of fields) {
    form.append(el("label", {}, label, el("input", { name, value: params.get(name) || "", placeholder: hint || "" })));
  }
  for (const x of extra || []) form.append(x);
  form.append(el("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim() !== "") p.set(k, String(v).trim());
    location.hash = route + "?" + p.toString();
  });
  return form;
}

async function listPage(title, route, api_path, fields, head, cells, params) {
  const here = onThisPage();
  const status = el("p", { id: "status" }, "Loading…");
  show(el("h1", {}, title), filterForm(route, fields, params), status);
  const body = await apiShown(status, api_path + "?" + params.toString());
  if (!body || !here()) return;
  const offset = body.offset, limit = body.limit;
  status.textContent = body.rows.length === 0 ? "Nothing matches." : `Rows ${offset + 1}–${offset + body.rows.length}${body.more ? " (more follow)" : ""}`;
  const page = (o) => { const p = new URLSearchParams(params); p.set("offset", String(o)); return route + "?" + p.toString(); };
  document.getElementById("main").append(
    el("table", { id: "rows" }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, body.rows.map((r) => el("tr", {}, cells(r))))),
    el("p", { class: "pages" },
      offset > 0 ? el("a", { href: page(Math.max(0, offset - limit)) }, "← previous page") : null, " ",
      body.more ? el("a", { href: page(offset + limit) }, "next page →") : null));
}

// An alert's figure with its unit (the API gives it with each alert).
function withUnit(v, unit) {
  return unit ? `${num(v, 2)} ${unit}` : num(v, 2);
}

function alertsPage(params) {
  return listPage("Alerts", "#/alerts", "/api/alerts",
    [["from", "From (UTC)"], ["to", "To (UTC)"], ["kind", "Kind", "low_mos, high_loss, no_rtp, one_way_audio, low_asr, scanning…"], ["call_id", "Call-ID"], ["source", "Source address"], ["key", "Key (trunk, direction…)"]],
    ["Time (UTC)", "Kind", "Key", "Value", "Threshold", "Source", "Call"],
    (a) => [el("td", {}, time(a.ts_ns)), el("td", {}, words(a.kind)), el("td", { class: "wrap" }, a.key || ""), el("td", { class: "n" }, withUnit(a.value, a.unit)),
      el("td", { class: "n" }, withUnit(a.threshold, a.unit)), el("td", {}, a.source || ""),
      el("td", {}, a.call_id ? el("a", { href: "#/calls?call_id=" + encodeURIComponent(a.call_id) }, a.call_id) : "")],
    params);
}

function registrationsPage(params) {
  return listPage("Registrations", "#/registrations", "/api/registrations",
    [["from", "From (UTC)"], ["to", "To (UTC)"], ["aor", "Address of record", "sip:alice@example.com"], ["outcome", "Outcome", "registered, unregistered, challenged, auth_failed, failed"], ["client", "Client address"], ["registrar", "Registrar address"]],
    ["Time (UTC)", "Address of record", "Outcome", "Status", "Expires s", "Client", "Registrar", "User-Agent", "Contact"],
    (r) => [el("td", {}, time(r.ts_ns)), el("td", { class: "wrap" }, r.aor || ""), el("td", {}, words(r.outcome)), el("td", {}, r.status ?? ""),
      el("td", { class: "n" }, r.expires ?? ""), el("td", {}, r.client ? `${r.client}:${r.client_port}` : ""),
      el("td", {}, r.registrar ? `${r.registrar}:${r.registrar_port}` : ""), el("td", { class: "wrap" }, r.user_agent || ""), el("td", { class: "wrap" }, r.contact || "")],
    params);
}

async function kpiPage(params) {
  const here = onThisPage();
  const dimension = el("select", { name: "dimension" }, ["total", "trunk", "caller_domain", "callee_domain", "user_agent"].map((d) => el("option", { value: d }, d.replaceAll("_", " "))));
  dimension.value = params.get("dimension") || "total";
  const interval = el("select", { name: "interval" }, [["300", "5 minutes"], ["3600", "hour"], ["86400", "day"]].map(([v, l]) => el("option", { value: v }, l)));
  interval.value = params.get("interval") || "3600";
  const status = el("p", { id: "status" }, "Loading…");
  show(el("h1", {}, "KPIs"), filterForm("#/kpi", [["from", "From (UTC)"], ["to", "To (UTC)"]], params,
    [el("label", {}, "By", dimension), el("label", {}, "Per", interval)]), status);
  const body = await apiShown(status, "/api/kpi?" + params.toString());
  if (!body || !here()) return;
  status.textContent = body.rows.length === 0 ? "No KPI rows stored for this range." : `${body.rows.length} rows${body.more ? " (the first; narrow the range for more)" : ""}. Definitions: `;
  if (body.rows.length) status.append(el("a", { href: "/assets/kpi.md", id: "kpi-doc" }, "docs/kpi.md"), ".");
  const pct = (v) => (v === null || v === undefined ? "" : num(v, 1));
  const table = el("table", { id: "kpi" },
    el("thead", {}, el("tr", {}, ["Interval (UTC)", "Key", "Attempts", "Answered", "ASR %", "NER %", "SER %", "SEER %", "SRD ms", "Registrations", "IRA %"].map((h) => el("th", {}, h)))),
    el("tbody", {}, body.rows.map((r) => el("tr", {},
      el("td", {}, time(r.start_ns)), el("td", {}, r.key), el("td", { class: "n" }, r.counts.attempts), el("td", { class: "n" }, r.counts.answered),
      el("td", { class: "n" }, pct(r.figures.asr)), el("td", { class: "n" }, pct(r.figures.ner)), el("td", { class: "n" }, pct(r.figures.ser)),
      el("td", { class: "n" }, pct(r.figures.seer)), el("td", { class: "n" }, pct(r.figures.srd_ms)), el("td", { class: "n" }, r.counts.registrations),
      el("td", { class: "n" }, pct(r.figures.ira))))));
  // ASR and NER over time for the busiest key.
  const byKey = {};
  for (const r of body.rows) (byKey[r.key] = byKey[r.key] || []).push(r);
  const busiest = Object.keys(byKey).sort((a, b) => byKey[b].reduce((n, r) => n + r.counts.attempts, 0) - byKey[a].reduce((n, r) => n + r.counts.attempts, 0))[0];
  const charts = busiest ? el("div", { class: "stream-charts" }, el("h3", {}, "Key " + busiest),
    chart("ASR %", byKey[busiest], (r) => r.figures.asr, 0, 100, "asr"),
    chart("NER %", byKey[busiest], (r) => r.figures.ner, 0, 100, "ner"),
    chart("Attempts", byKey[busiest], (r) => r.counts.attempts, 0, null, "attempts")) : null;
  // Load over time and the spread of quality, for the same range.
  const range = new URLSearchParams();
  for (const k of ["from", "to"]) if (params.get(k)) range.set(k, params.get(k));
  const [load, mos] = await Promise.all([
    api("/api/kpi/load?" + range.toString() + "&interval=" + interval.value).catch(() => null),
    api("/api/kpi/mos?" + range.toString()).catch(() => null)]);
  if (!here()) return;
  const loadCharts = load && load.rows.length ? el("div", { class: "stream-charts" }, el("h3", {}, "Load"),
    chart("Concurrent calls (most)", load.rows, (r) => r.max_calls_open, 0, null, "concurrent"),
    chart("Calls started", load.rows, (r) => r.calls_started, 0, null, "started")) : null;
  document.getElementById("main").append(...[charts, loadCharts, mos ? mosBars(mos.bands, mos.answered_without_mos) : null, table].filter((x) => x));
}

// Calls per MOS band, as horizontal bars (SVG: the page allows no inline style).
function mosBars(bands, without) {
  const most = Math.max(1, without || 0, ...bands.map((b) => b.calls));
  const w = 300, row = 16, rows = bands.length + 1;
  const svg = el("svg:svg", { class: "chart", id: "mos-bands", width: w, height: 20 + row * rows, viewBox: `0 0 ${w} ${20 + row * rows}` },
    el("svg:text", { x: 4, y: 12, class: "title" }, "Calls by worst stream MOS"));
  // Answered calls no stream of which was scored: no media, one way, or no E-model value.
  const y = 18 + bands.length * row;
  svg.append(el("svg:text", { x: 4, y: y + 11, class: "tick" }, "no MOS"),
    el("svg:rect", { x: 60, y: y + 2, height: row - 4, width: ((w - 110) * (without || 0) / most).toFixed(1), class: "plain", id: "mos-none", "data-calls": without || 0 },
      el("svg:title", {}, "answered calls without a scored voice stream (no media, one way only, or a codec without an E-model value)")),
    el("svg:text", { x: w - 4, y: y + 11, class: "tick", "text-anchor": "end" }, String(without || 0)));
  bands.forEach((b, i) => {
    const y = 18 + i * row;
    svg.append(el("svg:text", { x: 4, y: y + 11, class: "tick" }, `${b.from.toFixed(1)}–${b.to.toFixed(1)}`),
      el("svg:rect", { x: 60, y: y + 2, height: row - 4, width: ((w - 110) * b.calls / most).toFixed(1), class: mosClass(b.from + 0.25), "data-calls": b.calls }),
      el("svg:text", { x: w - 4, y: y + 11, class: "tick", "text-anchor": "end" }, String(b.calls)));
  });
  return el("div", { class: "stream-charts" }, el("h3", {}, "Quality"), svg);
}

// ---- Routing ----------------------------------------------------------------

// Which parts this console serves (GET /api/console): `serve` has a
// database and no probe; a probe may have no database.
let parts = null;
const PAGE_PART = { "/live": "live", "/probe": "probe", "/rules": "rules", "/alerts": "database",
  "/registrations": "database", "/kpi": "database", "/calls": "database", "/": "database", "": "database" };
const PART_WHERE = {
  database: "a database: `calliper serve --db FILE`, or `calliper probe --db FILE --http ADDR`",
  live: "a running probe: `calliper probe -i IFACE --http ADDR`",
  probe: "a running probe: `calliper probe -i IFACE --http ADDR`",
  rules: "a running probe with rules: `calliper probe --rules FILE --http ADDR`",
};

async function route() {
  leaveProbePages();
  navigation += 1;
  const here = onThisPage();
  if (parts === null) {
    const answer = await api("/api/console").catch(() => ({ database: true, live: true, probe: true, rules: true }));
    parts = parts || answer;
    document.querySelectorAll("nav a[data-part]").forEach((a) => { a.hidden = !parts[a.dataset.part]; });
    if (!here()) return;
  }
  const hash = location.hash || (parts.database ? "#/calls" : "#/live");
  const [path, query] = hash.slice(1).split("?");
  const part = path.startsWith("/call/") ? "database" : PAGE_PART[path];
  if (part && !parts[part]) {
    show(el("p", {}, `This console does not have this page: it needs ${PART_WHERE[part]}.`));
    return;
  }
  const call = path.match(/^\/call\/(\d+)$/);
  if (call) callPage(call[1]);
  else if (path === "/live") livePage();
  else if (path === "/probe") healthPage();
  else if (path === "/rules") rulesPage(new URLSearchParams(query || ""));
  else if (path === "/alerts") alertsPage(new URLSearchParams(query || ""));
  else if (path === "/registrations") registrationsPage(new URLSearchParams(query || ""));
  else if (path === "/kpi") kpiPage(new URLSearchParams(query || ""));
  else if (path === "/calls" || path === "/" || path === "") searchPage(new URLSearchParams(query || ""));
  else show(el("p", { class: "error" }, "No such page: " + path + ". "), el("a", { href: "#/calls" }, "Calls"));
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

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

function time(ns) {
  if (ns === null || ns === undefined) return "";
  const d = new Date(Number(BigInt(ns) / 1000000n));
  return d.toISOString().replace("T", " ").replace("Z", "");
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
];
const SORTS = ["time", "duration", "mos", "setup_delay", "status"];

async function searchPage(params) {
  const form = el("form", { id: "search", class: "search" });
  for (const [name, label, hint] of FIELDS) {
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
  let body;
  try {
    body = await api("/api/calls?" + params.toString());
  } catch (e) {
    status.textContent = "Error: " + visible(e.message);
    status.className = "error";
    return;
  }
  const limit = body.limit, offset = body.offset;
  const rows = body.calls.map((c) =>
    el("tr", { "data-id": c.id, class: "call", onclick: () => (location.hash = "#/call/" + c.id) },
      el("td", {}, el("a", { href: "#/call/" + c.id }, time(c.invite_ns))),
      el("td", {}, c.from_user || c.from_uri || ""),
      el("td", {}, c.to_user || c.to_uri || ""),
      el("td", {}, c.state || ""),
      el("td", {}, c.final_status ?? ""),
      el("td", { class: "n" }, c.answer_ns === null || c.answer_ns === undefined ? "" : seconds(c.duration_ms)),
      el("td", {}, c.codecs || ""),
      el("td", { class: "n " + mosClass(c.worst_mos) }, num(c.worst_mos, 2)),
      el("td", { class: "n" }, num(c.worst_loss_percent, 1)),
      el("td", { class: "n" }, num(c.setup_delay_ms, 1)),
    ));
  const table = el("table", { id: "calls" },
    el("thead", {}, el("tr", {}, ["Time (UTC)", "Caller", "Callee", "State", "Status", "Duration", "Codecs", "MOS", "Loss %", "SRD ms"].map((h) => el("th", {}, h)))),
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

// ---- One call --------------------------------------------------------------

async function callPage(id) {
  show(el("p", {}, "Loading call " + id + "…"));
  let c;
  try {
    c = await api("/api/calls/" + encodeURIComponent(id));
  } catch (e) {
    show(el("p", { class: "error" }, "Error: " + visible(e.message)));
    return;
  }
  const facts = [
    ["Call-ID", c.call_id], ["Caller", c.from_uri], ["Callee", c.to_uri],
    ["Caller agent", c.caller_user_agent], ["Callee agent", c.callee_user_agent],
    ["Caller address", c.caller_ip ? `${c.caller_ip}:${c.caller_port}` : ""],
    ["Callee address", c.callee_ip ? `${c.callee_ip}:${c.callee_port}` : ""],
    ["INVITE", time(c.invite_ns)], ["Answered", time(c.answer_ns)], ["Ended", time(c.end_ns)],
    ["State", c.state], ["Final status", [c.final_status, c.final_reason].filter((x) => x).join(" ")],
    ["Setup delay (SRD)", c.setup_delay_ms === null ? "" : num(c.setup_delay_ms, 1) + " ms"],
    ["Duration", seconds(c.duration_ms)], ["Hung up by", [c.hangup_by, c.hangup_reason].filter((x) => x).join(": ")],
    ["Worst MOS", num(c.worst_mos, 2)], ["DTMF", c.dtmf_digits],
    ["Labels", Array.isArray(c.labels) ? c.labels.join(", ") : c.labels === null || c.labels === undefined ? "" : String(c.labels)],
  ].filter(([, v]) => v !== null && v !== undefined && v !== "");
  const dl = el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
  const viewer = el("div", { id: "message", class: "message" }, el("p", { class: "hint" }, "Click an arrow to read its message; tick two to compare them."));
  const stored = c.messages.length > 0 || c.streams.some((s) => (s.intervals || []).length > 0);
  const noDetail = stored ? null : el("p", { class: "note", id: "no-detail" },
    "This database holds no SIP messages or interval reports for this call: it was written with --no-call-detail, " +
    "or by a version before the console. Analyse the capture into a new database to see the ladder and the charts.");
  show(
    el("p", {}, el("a", { href: "#/calls" }, "← calls")),
    el("h1", {}, "Call " + c.id), dl,
    c.recording_pcap ? el("p", { id: "recording" }, el("a", { href: c.recording_pcap, download: `call-${c.id}.pcap` }, "Download the call's packets (pcap)")) : null,
    player(c),
    noDetail,
    (c.truncated || []).length ? el("p", { class: "note", id: "truncated" },
      "Only the first of this call's " + c.truncated.join(", ") + " are shown: the database holds more than the console sends at once.") : null,
    el("h2", {}, `SIP ladder (${c.messages.length} messages)`),
    c.messages.length ? ladder(c.messages, viewer) : null, c.messages.length ? viewer : null,
    el("h2", {}, `Streams (${c.streams.length})`), streamTable(c.streams),
    (c.loss_by_leg || []).length ? el("div", {}, el("h2", {}, "Loss by leg"), legTable(c.loss_by_leg)) : null,
    (c.related_streams || []).length ? el("div", {}, el("h2", {}, "Streams without a call carrying its SSRCs"),
      el("p", { class: "hint" }, "Media no SDP of this call named, with the same SSRC in the call's time: a relay's other leg, or the phone at another address."),
      el("table", { id: "related-streams" }, el("thead", {}, el("tr", {}, ["First (UTC)", "From", "To", "SSRC", "Codec", "Packets", "Loss %", "MOS"].map((t) => el("th", {}, t)))),
        el("tbody", {}, c.related_streams.map((s) => el("tr", {}, el("td", {}, time(s.first_ns)), el("td", {}, `${s.src}:${s.src_port}`),
          el("td", {}, `${s.dst}:${s.dst_port}`), el("td", {}, "0x" + Number(s.ssrc).toString(16).padStart(8, "0")), el("td", {}, s.codec || ""),
          el("td", { class: "n" }, s.packets), el("td", { class: "n" }, num(s.loss_percent, 2)), el("td", { class: "n" }, num(s.mos, 2))))))) : null,
    el("div", { id: "charts" }, c.streams.map(streamCharts)),
    c.alerts.length ? el("h2", {}, "Alerts") : null,
    c.alerts.length ? el("ul", { id: "alerts" }, c.alerts.map((a) => el("li", {}, `${time(a.ts_ns)} ${a.kind}${a.key ? " (" + a.key + ")" : ""}: ${withUnit(a.value, a.unit)} (threshold ${withUnit(a.threshold, a.unit)})`))) : null,
  );
}

// The call's voice from its recording: a player, and each side's waveform
// drawn from the WAV's own samples (the caller above, the callee below);
// a click on the waveform plays from there.
const WAVE_SLICES = 600;
function player(c) {
  if (!c.recording_audio) return null;
  const canvas = el("canvas", { id: "waveform", width: WAVE_SLICES, height: 120 });
  const status = el("p", { class: "hint", id: "audio-status" }, "Decoding the recording…");
  const audio = el("audio", { id: "audio", controls: "", preload: "metadata" });
  canvas.addEventListener("click", (e) => {
    if (!isFinite(audio.duration)) return;
    audio.currentTime = audio.duration * e.offsetX / canvas.clientWidth;
    audio.play();
  });
  (async () => {
    try {
      const r = await fetch(location.origin + c.recording_audio, { credentials: "same-origin" });
      if (!r.ok) {
        const body = await r.json().catch(() => ({ error: r.statusText }));
        throw new Error(body.error || r.statusText);
      }
      const bytes = await r.arrayBuffer();
      const wave = wavePeaks(bytes);
      drawWave(canvas, wave.peaks);
      canvas.dataset.peaks = JSON.stringify(wave.peaks.map((side) => side.map((p) => Math.round(p * 1000) / 1000)));
      audio.src = URL.createObjectURL(new Blob([bytes], { type: "audio/wav" }));
      status.textContent = `${wave.seconds.toFixed(1)} s at ${wave.rate} Hz: the caller above, the callee below.`;
    } catch (e) {
      status.textContent = "No audio: " + visible(e.message);
      status.className = "error";
    }
  })();
  return el("div", { id: "player" }, el("h2", {}, "Audio"), audio, el("div", {}, canvas), status);
}

// Each channel's largest |sample| (0 to 1) in each of WAVE_SLICES slices
// of a 16-bit stereo WAV (the console's own), its rate and length.
function wavePeaks(buf) {
  const v = new DataView(buf);
  let at = 12, rate = 0, data = null;
  while (at + 8 <= v.byteLength) {
    const id = String.fromCharCode(v.getUint8(at), v.getUint8(at + 1), v.getUint8(at + 2), v.getUint8(at + 3));
    const size = v.getUint32(at + 4, true);
    if (id === "fmt ") rate = v.getUint32(at + 12, true);
    if (id === "data") { data = { start: at + 8, length: Math.min(size, v.byteLength - at - 8) }; break; }
    at += 8 + size + (size % 2);
  }
  if (!data || !rate) throw new Error("not a WAV");
  const frames = Math.floor(data.length / 4);
  const peaks = [new Array(WAVE_SLICES).fill(0), new Array(WAVE_SLICES).fill(0)];
  for (let i = 0; i < frames; i++) {
    const slice = Math.floor(i * WAVE_SLICES / frames);
    for (let ch = 0; ch < 2; ch++) {
      const s = Math.abs(v.getInt16(data.start + 4 * i + 2 * ch, true)) / 32768;
      if (s > peaks[ch][slice]) peaks[ch][slice] = s;
    }
  }
  return { peaks, rate, seconds: frames / rate };
}

function drawWave(canvas, peaks) {
  const g = canvas.getContext("2d"), half = canvas.height / 2;
  g.fillStyle = "#fff";
  g.fillRect(0, 0, canvas.width, canvas.height);
  peaks.forEach((side, ch) => {
    g.fillStyle = ch === 0 ? "#1f6feb" : "#1a7f37";
    const middle = half * ch + half / 2;
    side.forEach((p, x) => {
      const a = p * half / 2;
      g.fillRect(x, middle - a, 1, Math.max(1, 2 * a));
    });
  });
}

function label(m) {
  return m.method ? m.method : `${m.status} ${m.cseq_method ? "(" + m.cseq_method + ")" : ""}`;
}

// The ladder: one column per address, one arrow per message, in time order.
function ladder(messages, viewer) {
  const hosts = [];
  for (const m of messages) for (const h of [`${m.src}:${m.src_port}`, `${m.dst}:${m.dst_port}`]) if (!hosts.includes(h)) hosts.push(h);
  const colW = 220, rowH = 28, top = 40;
  const width = Math.max(1, hosts.length) * colW, height = top + messages.length * rowH + 10;
  const svg = el("svg:svg", { id: "ladder", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  hosts.forEach((h, i) => {
    const x = i * colW + colW / 2;
    svg.append(el("svg:text", { x, y: 16, "text-anchor": "middle", class: "host" }, h));
    svg.append(el("svg:line", { x1: x, y1: 24, x2: x, y2: height, class: "life" }));
  });
  const picked = [];
  const t0 = messages.length ? BigInt(messages[0].ts_ns) : 0n;
  messages.forEach((m, i) => {
    const a = hosts.indexOf(`${m.src}:${m.src_port}`), b = hosts.indexOf(`${m.dst}:${m.dst_port}`);
    const x1 = a * colW + colW / 2, x2 = b * colW + colW / 2, y = top + i * rowH + 10;
    const dir = x2 >= x1 ? 1 : -1;
    const g = el("svg:g", { class: "arrow " + (m.method ? "request" : "response"), "data-id": m.id, tabindex: 0 });
    const ms = Number(BigInt(m.ts_ns) - t0) / 1e6;
    g.append(
      el("svg:line", { x1, y1: y, x2: x2 - dir * 6, y2: y }),
      el("svg:path", { d: `M${x2},${y} l${-dir * 8},-4 l0,8 z` }),
      el("svg:text", { x: (x1 + x2) / 2, y: y - 4, "text-anchor": "middle" }, label(m)),
      el("svg:text", { x: 4, y: y + 4, class: "when" }, "+" + ms.toFixed(1) + " ms"),
    );
    const open = () => {
      svg.querySelectorAll(".arrow.open").forEach((n) => n.classList.remove("open"));
      g.classList.add("open");
      const tick = el("input", { type: "checkbox", id: "compare" });
      tick.checked = picked.includes(m);
      tick.addEventListener("change", () => {
        const k = picked.indexOf(m);
        if (tick.checked && k < 0) picked.push(m);
        if (!tick.checked && k >= 0) picked.splice(k, 1);
        while (picked.length > 2) picked.shift();
        svg.querySelectorAll(".arrow").forEach((n) => n.classList.toggle("picked", picked.some((p) => String(p.id) === n.dataset.id)));
        if (picked.length === 2) viewer.append(diff(picked[0], picked[1]));
      });
      viewer.replaceChildren(
        el("p", {}, `${time(m.ts_ns)}  ${m.src}:${m.src_port} → ${m.dst}:${m.dst_port} (${m.transport})${m.truncated ? " — cut at 16 KiB" : ""}  `,
          el("label", {}, tick, " compare")),
        el("pre", { id: "raw" }, m.message));
    };
    g.addEventListener("click", open);
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    svg.append(g);
  });
  return el("div", { class: "ladder" }, svg);
}

// A line diff of two messages (longest common subsequence of lines).
function diff(a, b) {
  const x = a.message.split(/\r?\n/), y = b.message.split(/\r?\n/);
  const n = Math.min(x.length, 400), m = Math.min(y.length, 400);
  const L = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = el("pre", { id: "diff" });
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && x[i] === y[j]) { out.append(el("span", {}, "  " + x[i] + "\n")); i++; j++; }
    else if (i < n && (j >= m || L[i + 1][j] >= L[i][j + 1])) { out.append(el("span", { class: "del" }, "- " + x[i] + "\n")); i++; }
    else { out.append(el("span", { class: "add" }, "+ " + y[j] + "\n")); j++; }
  }
  const name = (m) => `${label(m)} at ${time(m.ts_ns)} from ${m.src}:${m.src_port}`;
  return el("div", {}, el("h3", {}, `Diff: − ${name(a)}, + ${name(b)}`), out);
}

// A JSON column as the API gives it (text from the database, or parsed).
function parsed(v) {
  if (typeof v !== "string") return v ?? null;
  try { return JSON.parse(v); } catch (e) { return null; }
}

// MOS after each jitter-buffer model (fixed 50 ms, fixed 200 ms, adaptive).
function bufferMos(s) {
  const models = parsed(s.jitter_buffers);
  if (!Array.isArray(models)) return "";
  return models.map((m) => `${m.model}: ${m.mos === null || m.mos === undefined ? "–" : num(m.mos, 2)}${m.late ? ` (${m.late} late)` : ""}`).join(", ");
}

function streamTable(streams) {
  const head = ["Direction", "From", "To", "SSRC", "Codec", "Packets", "Lost", "Loss %", "Dup", "Restarts", "Jitter ms", "Max jitter ms", "Max delta ms", "MOS", "MOS by jitter buffer",
    "RTCP reports", "RTCP loss % (max)", "RTCP lost", "RTCP jitter ms (max)", "RTT ms", "RTCP XR"];
  return el("table", { id: "streams" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, streams.map((s) => el("tr", { "data-ssrc": s.ssrc },
      el("td", {}, s.direction || ""), el("td", {}, `${s.src}:${s.src_port}`), el("td", {}, `${s.dst}:${s.dst_port}`),
      el("td", {}, "0x" + Number(s.ssrc).toString(16).padStart(8, "0")), el("td", {}, s.codec || ""),
      el("td", { class: "n" }, s.packets), el("td", { class: "n" }, s.lost), el("td", { class: "n" }, num(s.loss_percent, 2)),
      el("td", { class: "n" }, s.duplicates), el("td", { class: "n", title: "sequence restarts (a sender restarting its stream, e.g. after hold): jitter spans them" }, s.seq_resets ?? ""),
      el("td", { class: "n" }, num(s.mean_jitter_ms, 2)), el("td", { class: "n" }, num(s.max_jitter_ms, 2)),
      el("td", { class: "n" }, num(s.max_delta_ms, 2)), el("td", { class: "n " + mosClass(s.mos) }, num(s.mos, 2)),
      el("td", { class: "buffers" }, bufferMos(s)),
      el("td", { class: "n" }, s.rtcp_reports ?? ""), el("td", { class: "n" }, num(s.rtcp_max_fraction_lost, 1)),
      el("td", { class: "n" }, s.rtcp_cumulative_lost ?? ""), el("td", { class: "n" }, num(s.rtcp_max_jitter_ms, 2)),
      el("td", { class: "n" }, num(s.rtt_ms, 1)),
      el("td", {}, s.rtcp_xr === null || s.rtcp_xr === undefined ? "" : JSON.stringify(parsed(s.rtcp_xr) ?? s.rtcp_xr).slice(0, 120))))));
}

// Where each direction's loss was introduced, hop by hop along its path.
function legTable(paths) {
  const head = ["Direction", "Hop", "From", "To", "Expected", "Lost", "Loss %", "Introduced here", ""];
  return el("div", {}, el("table", { id: "legs" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, paths.map((p) => p.hops.map((h, i) => el("tr", { "data-direction": p.direction, class: h.introduced > 0 ? "lossy" : null },
      el("td", {}, i === 0 ? p.direction.replaceAll("_", " ") : ""), el("td", { class: "n" }, i + 1), el("td", {}, h.src), el("td", {}, h.dst),
      el("td", { class: "n" }, h.expected), el("td", { class: "n" }, h.lost), el("td", { class: "n" }, num(h.loss_percent, 2)),
      el("td", { class: "n" + (h.introduced > 0 ? " bad" : "") }, h.introduced),
      el("td", { class: "hint" }, i === 0 ? "first seen" : h.relayed ? "relayed unchanged: the loss before it shows here too" : "renumbered: its loss is its own")))))),
    el("p", { class: "hint" }, "Hops in the order packets crossed them (as the probe saw them). \"Introduced here\": lost between the probe's sight of the previous hop and this one."));
}

// Per stream: loss, jitter and MOS over the call, one point per interval.
function streamCharts(s) {
  const iv = s.intervals || [];
  const box = el("div", { class: "stream-charts", "data-ssrc": s.ssrc },
    el("h3", {}, `${s.direction || "stream"} ${s.src}:${s.src_port} → ${s.dst}:${s.dst_port} (${s.codec || "?"}), ${iv.length} interval${iv.length === 1 ? "" : "s"}`));
  if (iv.length === 0) return box;
  box.append(
    chart("Loss %", iv, (r) => r.loss_percent, 0, null, "loss"),
    chart("Jitter ms", iv, (r) => r.jitter_ms, 0, null, "jitter"));
  if (iv.some((r) => r.mos !== null && r.mos !== undefined)) box.append(chart("MOS", iv, (r) => r.mos, 1, 5, "mos"));
  else box.append(el("p", { class: "hint" }, "No MOS: " + String(s.unscored || "not a voice stream").replaceAll("_", " ")));
  return box;
}

function chart(title, rows, value, min, max, kind) {
  const w = 300, h = 130, pad = 30;
  const pts = rows.map((r) => [Number(BigInt(r.start_ns) / 1000000n), value(r)]).filter(([, v]) => v !== null && v !== undefined);
  const svg = el("svg:svg", { class: "chart", "data-kind": kind, "data-points": pts.length, width: w, height: h, viewBox: `0 0 ${w} ${h}` });
  svg.append(el("svg:text", { x: pad, y: 12, class: "title" }, title));
  if (pts.length === 0) return svg;
  const t0 = pts[0][0], t1 = Math.max(pts[pts.length - 1][0], t0 + 1);
  const hi = max ?? Math.max(1, ...pts.map(([, v]) => v)), lo = min;
  const X = (t) => pad + ((t - t0) / (t1 - t0)) * (w - pad - 8);
  const Y = (v) => h - 28 - ((v - lo) / (hi - lo || 1)) * (h - 50);
  // Time of day within a day; the date beyond.
  const clock = (ms) => new Date(ms).toISOString().slice(t1 - t0 > 86400000 ? 0 : 11, t1 - t0 > 86400000 ? 10 : 19);
  svg.append(
    el("svg:line", { x1: pad, y1: h - 28, x2: w - 8, y2: h - 28, class: "axis" }),
    el("svg:text", { x: pad, y: h - 14, class: "tick" }, clock(t0)),
    el("svg:text", { x: w - 8, y: h - 14, class: "tick", "text-anchor": "end" }, clock(t1)),
    el("svg:text", { x: 2, y: Y(hi) + 4, class: "tick" }, String(Math.round(hi * 10) / 10)),
    el("svg:text", { x: 2, y: Y(lo) + 4, class: "tick" }, String(lo)),
    el("svg:polyline", { points: pts.map(([t, v]) => `${X(t).toFixed(1)},${Y(v).toFixed(1)}`).join(" ") }));
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
  const status = el("p", { id: "status" }, "Loading…");
  show(el("h1", {}, title), filterForm(route, fields, params), status);
  let body;
  try {
    body = await api(api_path + "?" + params.toString());
  } catch (e) {
    status.textContent = "Error: " + visible(e.message);
    status.className = "error";
    return;
  }
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
    (a) => [el("td", {}, time(a.ts_ns)), el("td", {}, a.kind || ""), el("td", {}, a.key || ""), el("td", { class: "n" }, withUnit(a.value, a.unit)),
      el("td", { class: "n" }, withUnit(a.threshold, a.unit)), el("td", {}, a.source || ""),
      el("td", {}, a.call_id ? el("a", { href: "#/calls?call_id=" + encodeURIComponent(a.call_id) }, a.call_id) : "")],
    params);
}

function registrationsPage(params) {
  return listPage("Registrations", "#/registrations", "/api/registrations",
    [["from", "From (UTC)"], ["to", "To (UTC)"], ["aor", "Address of record", "sip:alice@example.com"], ["outcome", "Outcome", "registered, unregistered, challenged, auth_failed, failed"], ["client", "Client address"], ["registrar", "Registrar address"]],
    ["Time (UTC)", "Address of record", "Outcome", "Status", "Expires s", "Client", "Registrar", "User-Agent", "Contact"],
    (r) => [el("td", {}, time(r.ts_ns)), el("td", {}, r.aor || ""), el("td", {}, r.outcome || ""), el("td", {}, r.status ?? ""),
      el("td", { class: "n" }, r.expires ?? ""), el("td", {}, r.client ? `${r.client}:${r.client_port}` : ""),
      el("td", {}, r.registrar ? `${r.registrar}:${r.registrar_port}` : ""), el("td", {}, r.user_agent || ""), el("td", {}, r.contact || "")],
    params);
}

async function kpiPage(params) {
  const dimension = el("select", { name: "dimension" }, ["total", "trunk", "caller_domain", "callee_domain", "user_agent"].map((d) => el("option", { value: d }, d.replaceAll("_", " "))));
  dimension.value = params.get("dimension") || "total";
  const interval = el("select", { name: "interval" }, [["300", "5 minutes"], ["3600", "hour"], ["86400", "day"]].map(([v, l]) => el("option", { value: v }, l)));
  interval.value = params.get("interval") || "3600";
  const status = el("p", { id: "status" }, "Loading…");
  show(el("h1", {}, "KPIs"), filterForm("#/kpi", [["from", "From (UTC)"], ["to", "To (UTC)"]], params,
    [el("label", {}, "By", dimension), el("label", {}, "Per", interval)]), status);
  let body;
  try {
    body = await api("/api/kpi?" + params.toString());
  } catch (e) {
    status.textContent = "Error: " + visible(e.message);
    status.className = "error";
    return;
  }
  status.textContent = body.rows.length === 0 ? "No KPI rows stored for this range." : `${body.rows.length} rows${body.more ? " (the first; narrow the range for more)" : ""}. Definitions: docs/kpi.md.`;
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
  const loadCharts = load && load.rows.length ? el("div", { class: "stream-charts" }, el("h3", {}, "Load"),
    chart("Concurrent calls (most)", load.rows, (r) => r.max_calls_open, 0, null, "concurrent"),
    chart("Calls started", load.rows, (r) => r.calls_started, 0, null, "started")) : null;
  document.getElementById("main").append(...[charts, loadCharts, mos ? mosBars(mos.bands) : null, table].filter((x) => x));
}

// Calls per MOS band, as horizontal bars (SVG: the page allows no inline style).
function mosBars(bands) {
  const most = Math.max(1, ...bands.map((b) => b.calls));
  const w = 300, row = 16;
  const svg = el("svg:svg", { class: "chart", id: "mos-bands", width: w, height: 20 + row * bands.length, viewBox: `0 0 ${w} ${20 + row * bands.length}` },
    el("svg:text", { x: 4, y: 12, class: "title" }, "Calls by worst stream MOS"));
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
  if (parts === null) {
    parts = await api("/api/console").catch(() => ({ database: true, live: true, probe: true, rules: true }));
    document.querySelectorAll("nav a[data-part]").forEach((a) => { a.hidden = !parts[a.dataset.part]; });
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

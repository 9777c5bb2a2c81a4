// Calliper console: one call in full (app.js holds the helpers it uses):
// the flow of its SIP messages and media beside the message picked, its
// streams, charts and recording. Values from the API reach the page as
// text only, through el().
"use strict";

async function callPage(id) {
  const here = onThisPage();
  show(el("p", {}, "Loading call " + id + "…"));
  let c;
  try {
    c = await api("/api/calls/" + encodeURIComponent(id));
  } catch (e) {
    if (here()) show(el("p", { class: "error" }, "Error: " + visible(e.message)));
    return;
  }
  if (!here()) return;
  const facts = [
    ["Call-ID", c.call_id], ["Caller", c.from_uri], ["Callee", c.to_uri],
    ["Caller agent", c.caller_user_agent], ["Callee agent", c.callee_user_agent],
    ["Caller address", c.caller_ip ? `${c.caller_ip}:${c.caller_port}` : ""],
    ["Probe", c.probe],
    ["Callee address", c.callee_ip ? `${c.callee_ip}:${c.callee_port}` : ""],
    ["INVITE", time(c.invite_ns)], ["Answered", time(c.answer_ns)], ["Ended", time(c.end_ns)],
    ["State", words(c.state)], ["Final status", [c.final_status, c.final_reason].filter((x) => x).join(" ")],
    ["Setup delay (SRD)", c.setup_delay_ms === null ? "" : num(c.setup_delay_ms, 1) + " ms"],
    ["Duration", seconds(c.duration_ms)], ["Hung up by", [words(c.hangup_by), c.hangup_reason].filter((x) => x).join(": ")],
    ["Worst MOS", num(c.worst_mos, 2)], ["DTMF", c.dtmf_digits],
    ["Labels", Array.isArray(c.labels) ? c.labels.join(", ") : c.labels === null || c.labels === undefined ? "" : String(c.labels)],
  ].filter(([, v]) => v !== null && v !== undefined && v !== "");
  const dl = el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
  const viewer = el("div", { id: "message", class: "message" }, el("p", { class: "hint" }, "Click an arrow to read its message here; tick two to compare them."));
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
    el("h2", {}, `Flow (${c.messages.length} SIP messages, ${c.streams.length} streams)`),
    c.messages.length ? el("div", { class: "flow-view" }, flow(c, viewer), viewer) : null,
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

// The flow: one column per address, one arrow per SIP message and one
// band per stream (first to last packet: packets, loss, MOS, RTCP), in
// time order, times in seconds from the INVITE; re-INVITEs carry the
// marks the API found in their SDP (hold, resume, T.38, codec). A click
// shows the message in `viewer`, beside the flow.
function flow(c, viewer) {
  const messages = c.messages;
  const hosts = [];
  const add = (h) => { if (!hosts.includes(h)) hosts.push(h); return hosts.indexOf(h); };
  for (const m of messages) { add(`${m.src}:${m.src_port}`); add(`${m.dst}:${m.dst_port}`); }
  // Media joins the column of its address's signalling, else its own.
  const column = (ip, port) => { const i = hosts.findIndex((h) => h.slice(0, h.lastIndexOf(":")) === ip); return i >= 0 ? i : add(`${ip}:${port}`); };
  const t0 = nsOf(c.invite_ns) ?? nsOf(messages[0].ts_ns) ?? 0n;
  const rows = messages.map((m) => ({ ts: nsOf(m.ts_ns) ?? t0, m }))
    .concat(c.streams.filter((s) => nsOf(s.first_ns) !== null)
      .map((s) => ({ ts: nsOf(s.first_ns), s, from: column(s.src, s.src_port), to: column(s.dst, s.dst_port) })))
    .sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : a.m ? -1 : 1));
  const colW = 240, rowH = 28, bandH = 44, top = 40, left = 70;
  const heights = rows.map((r) => (r.s ? bandH : rowH));
  const width = left + Math.max(1, hosts.length) * colW, height = top + heights.reduce((a, b) => a + b, 0) + 10;
  const svg = el("svg:svg", { id: "ladder", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  const X = (i) => left + i * colW + colW / 2;
  hosts.forEach((h, i) => {
    svg.append(el("svg:text", { x: X(i), y: 16, "text-anchor": "middle", class: "host" }, h));
    svg.append(el("svg:line", { x1: X(i), y1: 24, x2: X(i), y2: height, class: "life" }));
  });
  const since = (ts) => "+" + (Number(ts - t0) / 1e9).toFixed(3) + " s";
  const picked = [];
  let y = top;
  rows.forEach((r, i) => {
    const mid = y + heights[i] / 2;
    y += heights[i];
    if (r.s) { svg.append(band(r.s, X(r.from), X(r.to), mid, since(r.ts), t0)); return; }
    const m = r.m;
    const x1 = X(hosts.indexOf(`${m.src}:${m.src_port}`)), x2 = X(hosts.indexOf(`${m.dst}:${m.dst_port}`));
    const dir = x2 >= x1 ? 1 : -1;
    const g = el("svg:g", { class: "arrow " + (m.method ? "request" : "response"), "data-id": m.id, tabindex: 0 });
    const marks = (m.marks || []).join(", ");
    g.append(
      el("svg:line", { x1, y1: mid, x2: x2 - dir * 6, y2: mid }),
      el("svg:path", { d: `M${x2},${mid} l${-dir * 8},-4 l0,8 z` }),
      el("svg:text", { x: (x1 + x2) / 2, y: mid - 4, "text-anchor": "middle" }, label(m), marks ? el("svg:tspan", { class: "mark" }, " · " + marks) : null),
      el("svg:text", { x: 4, y: mid + 4, class: "when" }, since(r.ts)),
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
        el("p", {}, `${label(m)}${marks ? " (" + marks + ")" : ""} at ${since(r.ts)}, ${time(m.ts_ns)}`),
        el("p", { class: "hint" }, `${m.src}:${m.src_port} → ${m.dst}:${m.dst_port} (${m.transport})${m.truncated ? " — cut at 16 KiB" : ""}  `,
          el("label", {}, tick, " compare")),
        el("pre", { id: "raw" }, m.message));
      // Beside the flow on a wide screen; below it on a narrow one.
      viewer.scrollIntoView({ block: "nearest" });
    };
    g.addEventListener("click", open);
    g.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
    svg.append(g);
  });
  return el("div", { class: "ladder" }, svg);
}

// One stream as a band between its ends, with what it carried.
function band(s, x1, x2, mid, when, t0) {
  const lo = Math.min(x1, x2), hi = Math.max(x1, x2);
  const at = (v) => { const n = nsOf(v); return n === null ? "?" : (Number(n - t0) / 1e9).toFixed(1); };
  const span = `${at(s.first_ns)}–${at(s.last_ns)} s`;
  const rtcp = s.rtcp_reports ? `RTCP ${s.rtcp_reports} reports` : "no RTCP seen";
  const mos = s.mos === null || s.mos === undefined ? words(s.unscored) || "no MOS" : "MOS " + num(s.mos, 2);
  const bar = mid + 8;
  return el("svg:g", { class: "band", "data-ssrc": s.ssrc },
    el("svg:rect", { x: lo, y: bar - 3, width: Math.max(hi - lo, 4), height: 6, class: mosClass(s.mos) || "plain" }),
    el("svg:path", { d: `M${x2},${bar} l${x2 >= x1 ? -8 : 8},-6 l0,12 z`, class: mosClass(s.mos) || "plain" }),
    el("svg:text", { x: (x1 + x2) / 2, y: mid - 10, "text-anchor": "middle" }, `RTP ${s.codec || "?"} ${span}`),
    el("svg:text", { x: (x1 + x2) / 2, y: mid + 2, "text-anchor": "middle" }, `${s.packets} packets, loss ${num(s.loss_percent, 2)} %, ${mos}, ${rtcp}`),
    el("svg:text", { x: 4, y: bar + 4, class: "when" }, when),
    el("svg:title", {}, `${words(s.direction)} ${s.src}:${s.src_port} → ${s.dst}:${s.dst_port}, SSRC 0x${Number(s.ssrc).toString(16).padStart(8, "0")}`));
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
const BUFFER_WORDS = { fixed50: "fixed 50 ms", fixed200: "fixed 200 ms", adaptive: "adaptive" };
function bufferMos(s) {
  const models = parsed(s.jitter_buffers);
  if (!Array.isArray(models)) return "";
  return models.map((m) => `${BUFFER_WORDS[m.model] || m.model}: ${m.mos === null || m.mos === undefined ? "–" : num(m.mos, 2)}${m.late ? ` (${m.late} late)` : ""}`).join(", ");
}

function streamTable(streams) {
  const head = ["Direction", "From → to", "SSRC", "Codec", "Packets", "Lost (%)", "Dup", "Jitter mean / max ms", "Max delta ms", "MOS",
    "MOS by jitter buffer", "RTCP from the receiver", "RTT ms", "RTCP XR"];
  return el("table", { id: "streams" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, streams.map((s) => el("tr", { "data-ssrc": s.ssrc },
      el("td", { class: "wrap" }, words(s.direction)), el("td", {}, `${s.src}:${s.src_port}`, el("br"), `→ ${s.dst}:${s.dst_port}`),
      el("td", {}, "0x" + Number(s.ssrc).toString(16).padStart(8, "0")), el("td", {}, s.codec || ""),
      el("td", { class: "n" }, s.packets), el("td", { class: "n" }, `${s.lost} (${num(s.loss_percent, 2)})`),
      el("td", { class: "n" }, s.duplicates), jitterCell(s),
      el("td", { class: "n" }, num(s.max_delta_ms, 2)), el("td", { class: "n " + mosClass(s.mos) }, s.mos === null || s.mos === undefined ? words(s.unscored) : num(s.mos, 2)),
      el("td", { class: "buffers wrap" }, bufferMos(s)), rtcpCell(s),
      el("td", { class: "n" }, num(s.rtt_ms, 1)), el("td", { class: "wrap" }, xrText(parsed(s.rtcp_xr)))))));
}

// Jitter as tshark gives it and, after a sequence restart, within the
// segments (the restart's timestamp jump left out: docs/rtp-analysis.md).
function jitterCell(s) {
  const td = el("td", { class: "n jitter" }, `${num(s.mean_jitter_ms, 2)} / ${num(s.max_jitter_ms, 2)}`);
  const within = s.segment_max_jitter_ms;
  if (s.seq_resets > 0 && within !== null && within !== undefined && within !== s.max_jitter_ms) {
    td.append(el("br"), el("span", { class: "hint within", title: "tshark's jitter takes a restart's timestamp jump as transit time; these figures leave it out" },
      `${num(s.segment_mean_jitter_ms, 2)} / ${num(within, 2)} within segments (${s.seq_resets} restart${s.seq_resets === 1 ? "" : "s"})`));
  }
  return td;
}

function rtcpCell(s) {
  if (!s.rtcp_reports) return el("td", { class: "hint rtcp" }, "no RTCP seen");
  return el("td", { class: "wrap rtcp" }, `${s.rtcp_reports} reports: loss up to ${num(s.rtcp_max_fraction_lost, 1)} %, ${s.rtcp_cumulative_lost} lost, jitter up to ${num(s.rtcp_max_jitter_ms, 2)} ms`);
}

// The receiver's own RTCP XR VoIP metrics, in words.
function xrText(x) {
  if (!x) return "";
  const r = x.r_factor === null || x.r_factor === undefined ? "" : `, R ${x.r_factor}`;
  return `loss ${num(x.loss_percent, 1)} %, discarded ${num(x.discard_percent, 1)} %, round trip ${x.round_trip_ms} ms${r}`;
}

// Where each direction's loss was introduced, hop by hop along its path.
function legTable(paths) {
  const head = ["Direction", "Hop", "From", "To", "Expected", "Lost", "Loss %", "Introduced here", ""];
  return el("div", {}, el("table", { id: "legs" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, paths.map((p) => p.hops.map((h, i) => el("tr", { "data-direction": p.direction, class: h.introduced > 0 ? "lossy" : null },
      el("td", {}, i === 0 ? words(p.direction) : ""), el("td", { class: "n" }, i + 1), el("td", {}, h.src), el("td", {}, h.dst),
      el("td", { class: "n" }, h.expected), el("td", { class: "n" }, h.lost), el("td", { class: "n" }, num(h.loss_percent, 2)),
      el("td", { class: "n" + (h.introduced > 0 ? " bad" : "") }, h.introduced),
      el("td", { class: "hint" }, i === 0 ? "first seen" : h.relayed ? "relayed unchanged: the loss before it shows here too" : "renumbered: its loss is its own")))))),
    el("p", { class: "hint" }, "Hops in the order packets crossed them (as the probe saw them). \"Introduced here\": lost between the probe's sight of the previous hop and this one."));
}

// A stream's restarts (ms) within its intervals' time: at most 16 finite
// numbers, whatever the database holds.
function restartMarks(s, iv) {
  const all = parsed(s.restarts_ns);
  const first = nsOf(iv[0].start_ns), last = nsOf(iv[iv.length - 1].end_ns);
  if (!Array.isArray(all) || first === null || last === null) return [];
  const [lo, hi] = [Number(first / 1000000n), Number(last / 1000000n)];
  return all.slice(0, 16).filter((v) => typeof v === "number" && Number.isFinite(v))
    .map((ns) => Math.round(ns / 1e6)).filter((ms) => ms >= lo && ms <= hi);
}

// Per stream: loss, jitter and MOS over the call, one point per interval.
function streamCharts(s) {
  const iv = s.intervals || [];
  const box = el("div", { class: "stream-charts", "data-ssrc": s.ssrc },
    el("h3", {}, `${words(s.direction) || "stream"} ${s.src}:${s.src_port} → ${s.dst}:${s.dst_port} (${s.codec || "?"}), ${iv.length} interval${iv.length === 1 ? "" : "s"}`));
  if (iv.length === 0) return box;
  box.append(
    chart("Loss %", iv, (r) => r.loss_percent, 0, null, "loss"),
    chart("Jitter ms", iv, (r) => r.jitter_ms, 0, null, "jitter", restartMarks(s, iv)));
  if (iv.some((r) => r.mos !== null && r.mos !== undefined)) box.append(chart("MOS", iv, (r) => r.mos, 1, 5, "mos"));
  else box.append(el("p", { class: "hint" }, "No MOS: " + (words(s.unscored) || "not a voice stream")));
  return box;
}

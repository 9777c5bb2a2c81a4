// Calliper console: the pages of a running probe (its live calls, its
// health, its rules). Loaded after app.js, whose helpers it uses. Every
// value from the API reaches the page as text, never as markup.
"use strict";

let liveSource = null;
let probeTimer = null;

// Stops what a probe page keeps running (called when the page changes).
function leaveProbePages() {
  if (liveSource) { liveSource.close(); liveSource = null; }
  if (probeTimer) { clearInterval(probeTimer); probeTimer = null; }
}

function livePage() {
  const here = onThisPage();
  const status = el("p", { id: "live-status" }, "Connecting…");
  const body = el("tbody", {});
  const table = el("table", { id: "live" },
    el("thead", {}, el("tr", {}, ["INVITE (UTC)", "Age", "Caller", "Callee", "Phase", "Status", "Duration", "Ended (UTC)", "Streams: codec, MOS, loss, jitter (latest interval)"].map((h) => el("th", {}, h)))),
    body);
  show(el("h1", {}, "Live calls"), status, table);
  liveSource = new EventSource(location.origin + "/api/live/events");
  liveSource.onmessage = (ev) => {
    const snap = JSON.parse(ev.data);
    status.textContent = `${snap.calls.length} calls open or just ended` +
      (snap.evicted ? ` (${snap.evicted} older ones taken off to make room: the live table holds 10 000)` : "");
    body.replaceChildren(...snap.calls.map((c) => {
      const end = c.end_ns ?? snap.now_ns;
      const duration = c.answer_ns === null || c.answer_ns === undefined ? "" : ((end - c.answer_ns) / 1e9).toFixed(0) + " s";
      return el("tr", { "data-call-id": c.call_id, class: "phase-" + c.phase },
        el("td", { title: time(c.invite_ns) }, time(c.invite_ns).slice(11, 19)), el("td", { class: "n age" }, ((snap.now_ns - c.invite_ns) / 1e9).toFixed(0) + " s"),
        el("td", { class: "clip", title: c.caller }, c.caller), el("td", { class: "clip", title: c.callee }, c.callee),
        el("td", {}, String(c.phase).replaceAll("_", " ")), el("td", {}, c.status ?? ""), el("td", { class: "n" }, duration),
        el("td", {}, c.end_ns === null || c.end_ns === undefined ? "" : time(c.end_ns).slice(11, 19)),
        el("td", { class: "wrap" }, c.streams.map((s) => el("div", { class: "live-stream" },
          `${s.src} → ${s.dst} ${s.codec} `, el("span", { class: mosClass(s.mos) }, s.mos === null || s.mos === undefined ? "–" : num(s.mos, 2)),
          ` ${num(s.loss_percent, 1)} % ${num(s.jitter_ms, 1)} ms`))));
    }));
  };
  liveSource.onerror = async () => {
    // A console without live calls answers 404: say so once, stop retrying.
    const r = await fetch(location.origin + "/api/live").catch(() => null);
    if (!here()) return;
    if (r && r.status === 404) {
      liveSource.close();
      status.textContent = visible(String((await r.json()).error));
      status.className = "error";
    } else {
      status.textContent = "Reconnecting…";
    }
  };
}

// ---- Probe health -------------------------------------------------------------

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}

// The engine's counters as [name, value], nested groups as group_counter.
function flatCounters(engine) {
  const out = [];
  for (const [k, v] of Object.entries(engine || {})) {
    if (typeof v === "number") out.push([k, v]);
    else if (v && typeof v === "object") for (const [k2, v2] of Object.entries(v)) out.push([k === "anomalies" ? "anomaly " + k2 : k + "_" + k2, v2]);
  }
  return out;
}

// A self-refreshing page's answer at `path`, or null: an error is shown
// and the page stops refreshing; an answer that comes after the user has
// left the page (`here()` false) is dropped.
async function refreshed(here, status, path) {
  let body;
  try {
    body = await api(path);
  } catch (e) {
    if (here()) {
      status.textContent = "Error: " + visible(e.message);
      status.className = "error";
      leaveProbePages();
    }
    return null;
  }
  if (!here()) return null;
  status.className = "";
  return body;
}

function healthPage() {
  const here = onThisPage();
  const status = el("p", { id: "health-status" }, "Loading…");
  const content = el("div", {});
  show(el("h1", {}, "Probe health"), status, content);
  let last = null;
  const refresh = async () => {
    const h = await refreshed(here, status, "/api/health");
    if (!h) return;
    const rate = last && h.updated_ns > last.updated_ns ? ((h.packets - last.packets) * 1e9 / (h.updated_ns - last.updated_ns)).toFixed(0) + " packets/s" : "";
    last = h;
    status.textContent = `Updated ${time(h.updated_ns)} UTC; refreshed every 2 s.`;
    const dropped = Object.entries(h.dropped || {});
    const lost = (h.capture ? h.capture.dropped : 0) + dropped.reduce((n, [, v]) => n + v, 0);
    const facts = [
      ["Input", h.input], ["Started (UTC)", time(h.started_ns)], ["Uptime", `${h.uptime_seconds} s`],
      ["Analysis threads", h.threads], ["Packets analysed (both directions)", `${h.packets} ${rate ? "(" + rate + ")" : ""}`],
      ["Capture ring", h.capture ? `${h.capture.received} received, ${h.capture.dropped} dropped, full ${h.capture.ring_full} times` : "reading files (no ring)"],
      ["Memory", `${bytes(h.memory.resident_bytes)} resident (peak ${bytes(h.memory.peak_resident_bytes)})`],
      ["Calls open", h.calls_open ?? "(shards do not say)"], ["Calls written", h.calls_written],
      ["Lost by the probe", lost === 0 ? "nothing" : `${lost} (see below)`],
    ];
    content.replaceChildren(...[
      el("dl", { class: "facts", id: "health" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", { class: k === "Lost by the probe" && lost > 0 ? "bad" : null }, String(v))])),
      el("h2", {}, "Interfaces (kernel counters)"),
      h.interfaces.length === 0 ? el("p", { class: "hint" }, "None: the probe reads files.") :
        el("p", { class: "hint", id: "interfaces-hint" }, "The kernel's counters since the interface came up, not since the probe started: " +
          "compare how fast they grow with the packet rate above. The probe captures both directions; on loopback the kernel hands the ring each packet twice (sent and received), and the probe analyses the received copy only."),
      h.interfaces.length === 0 ? null :
        el("table", { id: "interfaces" }, el("thead", {}, el("tr", {}, ["Interface", "Received packets", "Sent packets", "Received bytes", "Dropped", "Errors"].map((t) => el("th", {}, t)))),
          el("tbody", {}, h.interfaces.map((i) => el("tr", {}, el("td", {}, i.name), el("td", { class: "n" }, i.rx_packets ?? "–"), el("td", { class: "n" }, i.tx_packets ?? "–"),
            el("td", { class: "n" }, bytes(i.rx_bytes)), el("td", { class: "n" + (i.rx_dropped ? " bad" : "") }, i.rx_dropped ?? "–"),
            el("td", { class: "n" + (i.rx_errors ? " bad" : "") }, i.rx_errors ?? "–"))))),
      el("h2", {}, "Queues and trackers: dropped"),
      el("table", { id: "drops" }, el("tbody", {}, dropped.map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "n" + (v ? " bad" : "") }, v))))),
      el("h2", {}, "Engine counters (not zero)"),
      el("table", { id: "engine-counters" }, el("tbody", {}, flatCounters(h.engine).filter(([, v]) => v).map(([k, v]) =>
        el("tr", {}, el("td", { class: k.startsWith("anomaly") ? "fair" : null }, k), el("td", { class: "n" }, v)))))].filter((n) => n));
  };
  refresh();
  probeTimer = setInterval(refresh, 2000);
}

// ---- Rules ----------------------------------------------------------------------

// Sends a change with the write token (bearer: a browser never adds it by itself).
async function apiWrite(method, path, body) {
  const token = sessionStorage.getItem("calliper-write-token") || "";
  const headers = { Accept: "application/json", Authorization: "Bearer " + token };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(location.origin + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (!r.ok) throw new Error((await r.json().catch(() => ({ error: r.statusText }))).error || r.statusText);
}

// `net=10.0.0.0/8 dport=5060` as the JSON object a rule file's keys make.
function ruleFilter(text) {
  const rule = {};
  for (const part of text.trim().split(/\s+/).filter((p) => p)) {
    const i = part.indexOf("=");
    if (i <= 0) throw new Error(`"${part}" is not key=value`);
    const k = part.slice(0, i), v = part.slice(i + 1);
    rule[k] = k === "vlan" && /^\d+$/.test(v) ? Number(v) : v;
  }
  return rule;
}

async function rulesPage(params) {
  const here = onThisPage();
  const status = el("p", { id: "rules-status" }, "Loading…");
  const table = el("div", {});
  show(el("h1", {}, "Rules"), status, table);
  const offset = Number(params.get("offset") || 0);
  let writable = false;
  const refresh = async () => {
    const body = await refreshed(here, status, "/api/rules?offset=" + offset + "&limit=100");
    if (!body) return;
    writable = body.writable;
    status.textContent = `${body.total} rules${body.total > 100 ? `; ${offset + 1}–${offset + body.rules.length} shown` : ""}. Hits count packets (network rules) or calls and registrations (SIP rules). Changes here last until the rules file is reloaded or the probe restarts.`;
    table.replaceChildren(el("table", { id: "rules" },
      el("thead", {}, el("tr", {}, ["ID", "Name", "Priority", "Kind", "Filter", "Action", "Label", "Hits", ""].map((t) => el("th", {}, t)))),
      el("tbody", {}, body.rules.map((r) => el("tr", { "data-rule": r.id }, el("td", { class: "n" }, r.id), el("td", {}, r.name), el("td", { class: "n" }, r.priority),
        el("td", {}, r.kind), el("td", {}, r.filter), el("td", {}, r.action), el("td", {}, r.label ?? ""), el("td", { class: "n" }, r.hits),
        el("td", {}, writable ? el("button", { type: "button", class: "remove", onclick: async () => {
          try { await apiWrite("DELETE", "/api/rules/" + r.id); refresh(); } catch (e) { status.textContent = "Error: " + visible(e.message); status.className = "error"; }
        } }, "Remove") : ""))))),
    el("p", { class: "pages" },
      offset > 0 ? el("a", { href: "#/rules?offset=" + Math.max(0, offset - 100) }, "← previous page") : null, " ",
      offset + body.rules.length < body.total ? el("a", { href: "#/rules?offset=" + (offset + 100) }, "next page →") : null));
    return body;
  };
  const first = await refresh();
  if (!first || !here()) return;
  probeTimer = setInterval(refresh, 5000);
  if (!first.writable) {
    table.after(el("p", { class: "hint" }, "Read-only: the probe was started without a write token (--write-token-file)."));
    return;
  }
  const token = el("input", { name: "token", type: "password", autocomplete: "off", value: sessionStorage.getItem("calliper-write-token") || "" });
  const action = el("select", { name: "action" }, ["track", "ignore", "record", "label"].map((a) => el("option", { value: a }, a)));
  const form = el("form", { class: "search", id: "add-rule" },
    el("label", {}, "Write token", token),
    el("label", {}, "Filter", el("input", { name: "filter", placeholder: "net=10.0.0.0/8 dport=5060, or from_user=+4420*" })),
    el("label", {}, "Action", action),
    el("label", {}, "Label", el("input", { name: "label", placeholder: "for action label" })),
    el("label", {}, "Name", el("input", { name: "name" })),
    el("label", {}, "Priority", el("input", { name: "priority", placeholder: "0; highest wins" })),
    el("button", { type: "submit" }, "Add rule"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    sessionStorage.setItem("calliper-write-token", String(f.get("token")).trim());
    try {
      const rule = ruleFilter(String(f.get("filter")));
      rule.action = String(f.get("action"));
      for (const k of ["label", "name"]) if (String(f.get(k)).trim()) rule[k] = String(f.get(k)).trim();
      const priority = String(f.get("priority")).trim();
      if (priority) rule.priority = Number(priority);
      await apiWrite("POST", "/api/rules", rule);
      form.querySelector("[name=filter]").value = "";
      await refresh();
    } catch (e) {
      status.textContent = "Error: " + visible(e.message);
      status.className = "error";
    }
  });
  show(el("h1", {}, "Rules"), el("h2", {}, "Add a rule"), form,
    el("p", { class: "hint" }, "Filter keys are a rules file's (docs/rules.md): a, b, protocol, vlan for one flow; src, dst, net, sport, dport, port for networks and port ranges; from_user, from_domain, to_user, to_domain, user_agent for calls (exact, or with * at the start, the end or both)."),
    status, table);
}

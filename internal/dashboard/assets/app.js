// Hourglass dashboard: reads /ui/api/*, refreshes 3 s after the previous
// refresh ended, and sends changes as POST with the X-Hourglass-UI header
// (the server refuses changes without it, and all of them in read-only
// mode). Every change asks the user to confirm it first. Server data
// reaches the page through textContent only. No inline script or style:
// the server's Content-Security-Policy allows neither.
"use strict";

const $ = (sel) => document.querySelector(sel);
const refreshEvery = 3000;

let readOnly = false;
// The dead-letter filter applied last (by Filter), its next cursor, and
// whether the user paged on with More: then the periodic refresh leaves
// the list alone (it would fold it back to the first page).
let deadFilter = new URLSearchParams();
let deadCursor = "";
let deadPaged = false;
// Each listing's latest request: an older reply that arrives later is
// dropped instead of drawn over a newer one.
const latest = {};
// The last data each table was drawn from: a refresh that brings the same
// data leaves the table alone, so rows (and a button under the pointer)
// stay put.
const drawn = {};
// The task shown in Task lookup (Cancel acts on it), and the last move
// reading (for the rate).
let shownTask = "";
let lastMoved = null;
// The deployment's namespace (GET config); the shard count comes with
// each refresh of the shards, which follows the layout record.
let namespace = "";

async function api(path, opts = {}) {
  const res = await fetch("api/" + path, opts);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function post(path, body) {
  return api(path, { method: "POST", headers: { "X-Hourglass-UI": "1" }, body });
}

// fresh starts a request for key and returns a check that it is still
// the latest one.
function fresh(key) {
  const n = (latest[key] || 0) + 1;
  latest[key] = n;
  return () => latest[key] === n;
}

// changed reports whether key's data differs from the last drawn, and
// remembers it.
function changed(key, data) {
  const s = JSON.stringify(data);
  if (drawn[key] === s) return false;
  drawn[key] = s;
  return true;
}

function status(msg, bad) {
  const el = $("#status");
  el.textContent = msg;
  el.className = bad ? "warn" : "";
}

// guarded runs an action started from the page, reporting its failure.
async function guarded(what, run) {
  try { await run(); } catch (e) { status(what + " failed: " + e.message, true); }
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// confirmed asks the user to confirm a change (window.confirm: a
// browser dialog, which a page of another origin cannot show for a frame
// of this one, nor draw over), and says so in the status line when they
// decline.
function confirmed(label, ask) {
  if (window.confirm(ask)) return true;
  status(label + " not confirmed");
  return false;
}

// button adds a button that runs run, disabled while it runs, once the
// user confirmed ask (every button changes something).
function button(td, label, action, attrs, run, ask) {
  const b = document.createElement("button");
  b.type = "button"; // never a form's submit (the bulk actions sit in the filter's form)
  b.textContent = label;
  b.dataset.action = action;
  for (const [k, v] of Object.entries(attrs)) b.dataset[k] = v;
  b.addEventListener("click", async () => {
    if (b.disabled || !confirmed(label, typeof ask === "function" ? ask() : ask)) return;
    b.disabled = true;
    try { const said = await run(); status(typeof said === "string" ? said : label + " done"); await refresh(); }
    catch (e) { status(label + " failed: " + e.message, true); }
    finally { b.disabled = false; }
  });
  td.appendChild(b);
}

function counts(row, c) {
  for (const k of ["scheduled", "ready", "in_flight", "dead"]) cell(row, c[k], "n");
}

async function loadQueues() {
  const current = fresh("queues");
  const data = await api("queues");
  if (!current() || !changed("queues", data)) return;
  const body = $("#queues tbody");
  body.replaceChildren();
  for (const q of data.queues) {
    const row = body.insertRow();
    row.dataset.queue = q.name;
    const name = cell(row, q.name ? "" : "(no queue)");
    if (q.name) { // the queue page: its history charts
      const a = document.createElement("a");
      a.href = "queue.html?queue=" + encodeURIComponent(q.name);
      a.textContent = q.name;
      name.append(a);
    }
    cell(row, q.state, q.state);
    counts(row, q.counts);
    cell(row, keptText(q.retention)).dataset.col = "kept";
    cell(row, limitsText(q.limits)).dataset.col = "limits";
    cell(row, q.fair_window ? "fair, window " + q.fair_window : "due order").dataset.col = "turns";
    const shareIdle = q.routing && q.routing.share && q.workers > 0 && (!q.canaries || q.canaries === q.workers);
    cell(row, workersText(q), q.workers === 0 || shareIdle ? "warn" : "").dataset.col = "workers";
    const act = cell(row, "", "act");
    const path = "queues/" + encodeURIComponent(q.name);
    if (q.limits) button(act, "Clear limits", "unlimit", { queue: q.name }, () => post(path + "/unlimit"),
      "Clear the limits set at run time on queue " + q.name + "? Its workers go back to their own.");
    if (q.state === "active") button(act, "Pause", "pause", { queue: q.name }, () => post(path + "/pause"),
      "Pause queue " + q.name + "? Workers start none of its tasks until it is resumed.");
    if (q.state === "paused") button(act, "Resume", "resume", { queue: q.name }, () => post(path + "/resume"),
      "Resume queue " + q.name + "? Workers deliver what waited.");
  }
  $("#queuewarn").textContent = data.warning || "";
  const foot = $("#queues tfoot");
  foot.replaceChildren();
  const row = foot.insertRow();
  cell(row, "total");
  cell(row, "");
  counts(row, data.total);
  cell(row, "");
  cell(row, "");
  cell(row, "");
  cell(row, "");
  cell(row, "");
}

// workersText says how many live workers may take a queue's tasks, and
// the routing that decides it (hourglass queue route).
function workersText(q) {
  if (!q.name) return "-";
  if (q.routing_error) return "none eligible (unreadable routing: " + q.routing_error + ")";
  const n = q.workers === 0 ? "none eligible" : q.workers < 0 ? "?" : String(q.workers);
  const r = q.routing;
  if (!r) return n;
  const parts = [];
  if (r.not_tags) parts.push("not tagged " + r.not_tags.join(" or "));
  if (r.tags) parts.push("tagged " + r.tags.join(" and "));
  if (r.versions) parts.push("version " + r.versions.join(" or "));
  let warn = "";
  if (r.share) {
    const set = [];
    if (r.share.tags) set.push("tagged " + r.share.tags.join(" or "));
    if (r.share.versions) set.push("version " + r.share.versions.join(" or "));
    parts.push("share " + r.share.percent + "% to " + set.join(" or ") + ": " + (q.canaries || 0) + " canary");
    if (q.workers > 0 && !q.canaries) warn = ", no canary: its share waits";
    if (q.workers > 0 && q.canaries === q.workers) warn = ", all canaries: the rest waits";
  }
  return n + " (" + parts.join("; ") + ")" + warn;
}

// weightsQueue is the queue whose keys' weights the page shows.
let weightsQueue = "";

// loadWeights draws the keys of weightsQueue that have a weight (hourglass
// queue weight; 0 is a paused key) or a concurrency cap (hourglass queue
// keycap) of their own, and the queue's default cap.
async function loadWeights() {
  if (!weightsQueue) return;
  const data = await api("weights?queue=" + encodeURIComponent(weightsQueue));
  const ws = data.weights || {}, caps = (data.caps && data.caps.keys) || {};
  const rates = (data.caps && data.caps.rates) || {}, defRate = data.caps && data.caps.default_rate;
  const def = (data.caps && data.caps.default) || 0;
  // rateText: "50 per 1s, bursts of 1" (periods in ns, as the API's JSON).
  const rateText = (r) => r.rate > 0 ? r.rate + " per " + span(r.period) + (r.kind && r.kind !== "token_bucket" ? " by " + r.kind.replace("_", " ") : ", bursts of " + r.burst) : "none";
  $("#capdefault").textContent = (def > 0 ? "At most " + def + " tasks of each key running at once" : "No cap per key") +
    (defRate ? "; " + rateText(defRate) + " of each key" : "") + ", unless a key has limits of its own.";
  const body = $("#weights tbody");
  body.replaceChildren();
  const keys = [...new Set([...Object.keys(ws), ...Object.keys(caps), ...Object.keys(rates)])].sort();
  for (const k of keys) {
    const row = body.insertRow();
    row.dataset.key = k;
    cell(row, k === "" ? "(keyless)" : k);
    const w = k in ws ? ws[k] : 1;
    cell(row, w === 0 ? "0 (paused)" : w, "n");
    cell(row, !(k in caps) ? (def > 0 && k !== "" ? def + " (queue's)" : "-") : caps[k] === 0 ? "none" : caps[k], "n");
    cell(row, k in rates ? rateText(rates[k]) : defRate && k !== "" ? rateText(defRate) + " (queue's)" : "-", "n");
  }
  $("#noweights").hidden = keys.length > 0;
}

// keptText says what a queue keeps of its ended tasks (its retention, as
// `hourglass queue show` does): "1h, 10,000 a shard", or "-" for none.
function keptText(r) {
  if (!r) return "-";
  return span(r.age) + ", " + count(r.count) + " a shard";
}

// limitsText says what limits set at run time ask for (hourglass queue
// limit), as `hourglass queue show` does: "at most 5 running; 50 per 1s
// by token_bucket, burst 10", or "-" for none.
function limitsText(l) {
  if (!l) return "-";
  const parts = [];
  if (l.max_concurrency) parts.push("at most " + l.max_concurrency + " running");
  if (l.rate) parts.push(l.rate + " per " + span((l.period_ms || 1000) * 1e6) + " by " + (l.kind || "token_bucket") + ", burst " + (l.burst || 1));
  return parts.length ? parts.join("; ") : "no cap and no rate limit";
}

// span formats a duration in nanoseconds (a Go time.Duration) in the
// largest whole unit: 30d, 1h, 90m, 45s.
function span(ns) {
  const s = ns / 1e9;
  for (const [unit, n] of [["d", 86400], ["h", 3600], ["m", 60]]) {
    if (s >= n && s % n === 0) return s / n + unit;
  }
  return s + "s";
}

// when formats an API time, "-" for none.
// when shows a time as the CLI's tables do: local, 24-hour, to the
// millisecond, with the zone's offset ("2026-11-28 17:49:12.000 +01:00").
function when(t) {
  if (!t) return "-";
  const d = new Date(t);
  const p = (n, w) => String(n).padStart(w || 2, "0");
  const off = -d.getTimezoneOffset();
  const zone = (off < 0 ? "-" : "+") + p(Math.floor(Math.abs(off) / 60)) + ":" + p(Math.abs(off) % 60);
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)} ${zone}`;
}

// loadProcesses draws the live schedulers and workers (hourglass ps).
async function loadProcesses() {
  const current = fresh("processes");
  let data;
  try {
    data = await api("processes");
  } catch (e) {
    // Not the page's refresh: an ACL user without "client|list" may
    // leave only this table empty.
    if (!current()) return;
    delete drawn.processes;
    $("#processes tbody").replaceChildren();
    $("#noprocesses").hidden = false;
    $("#noprocesses").textContent = "Processes unknown: " + e.message;
    return;
  }
  if (!current()) return;
  $("#noprocesses").textContent = "No live scheduler or worker in this namespace.";
  $("#noprocesses").hidden = data.processes.length > 0;
  if (!current() || !changed("processes", data)) return;
  $("#noprocesses").hidden = data.processes.length > 0;
  const body = $("#processes tbody");
  body.replaceChildren();
  for (const p of data.processes) {
    const row = body.insertRow();
    row.dataset.process = p.id;
    row.dataset.role = p.role;
    cell(row, p.role);
    cell(row, p.id);
    cell(row, p.version);
    cell(row, p.host);
    cell(row, String(p.pid));
    cell(row, when(p.started));
    cell(row, p.role === "worker" ? p.busy + "/" + p.slots : "-").dataset.col = "busy";
    const qs = Object.keys(p.queues || {}).sort();
    cell(row, qs.map((q) => p.role === "worker" ? q + ":" + p.queues[q] : q).join(" "));
  }
}

async function loadSchedules() {
  const current = fresh("schedules");
  const data = await api("schedules");
  if (!current() || !changed("schedules", data)) return;
  $("#noschedules").hidden = data.schedules.length > 0;
  const body = $("#schedules tbody");
  body.replaceChildren();
  for (const s of data.schedules) {
    const row = body.insertRow();
    row.dataset.schedule = s.name;
    cell(row, s.name);
    cell(row, s.queue);
    cell(row, s.spec);
    cell(row, s.time_zone || "-");
    cell(row, when(s.last_fired)).dataset.col = "last";
    // The first next occurrence; the following ones on hover.
    const next = cell(row, when(s.next[0]));
    next.dataset.col = "next";
    next.title = s.next.map(when).join("\n");
    const paused = cell(row, s.paused ? "since " + when(s.paused_at) : "no", s.paused ? "paused" : "");
    paused.dataset.col = "paused";
    // History reads only: shown in read-only mode too.
    const hb = document.createElement("button");
    hb.type = "button";
    hb.textContent = "History";
    hb.dataset.action = "history";
    hb.dataset.schedule = s.name;
    hb.addEventListener("click", () => guarded("history", () => loadHistory(s.name)));
    cell(row, "").appendChild(hb);
    const act = cell(row, "", "act");
    const path = "schedules/" + encodeURIComponent(s.name);
    if (s.paused) button(act, "Resume", "resume", { schedule: s.name }, () => post(path + "/resume"),
      "Resume schedule " + s.name + "? Its next occurrence fires; those skipped are not caught up.");
    else button(act, "Pause", "pause", { schedule: s.name }, () => post(path + "/pause"),
      "Pause schedule " + s.name + "? Its occurrences are skipped until it is resumed.");
  }
}

// loadHistory shows a schedule's last outcomes (hourglass schedule
// history), newest first, below the schedules.
async function loadHistory(name) {
  const data = await api("schedulehistory?name=" + encodeURIComponent(name));
  $("#schedhisttitle").textContent = "History of " + name + ", newest first";
  const body = $("#schedhisttable tbody");
  body.replaceChildren();
  for (const o of data.history) {
    const row = body.insertRow();
    cell(row, when(o.at));
    let out = o.outcome + (o.caught_up ? " (caught up)" : "") + (o.count > 1 ? " ×" + o.count : "");
    cell(row, out, o.outcome === "fired" || o.outcome === "duplicate" ? "" : "warn");
    cell(row, when(o.recorded));
    cell(row, o.task_id || "-");
    cell(row, o.detail || "-");
  }
  if (data.history.length === 0) cell(body.insertRow(), "no history: the schedule never fired, or its history expired");
  $("#schedhist").hidden = false;
}

// loadDead draws the first page of the applied filter, or (more) appends
// the next page.
async function loadDead(more) {
  const q = new URLSearchParams(deadFilter);
  if (more) q.set("cursor", deadCursor);
  const current = fresh("dead");
  const page = await api("dead?" + q);
  if (!current() || (!more && !changed("dead", [q.toString(), page]))) return;
  if (more) delete drawn.dead;
  deadPaged = more;
  const body = $("#dead tbody");
  if (!more) body.replaceChildren();
  for (const t of page.tasks) {
    const row = body.insertRow();
    row.dataset.id = t.id;
    cell(row, t.id);
    cell(row, t.queue);
    cell(row, when(t.dead.at));
    cell(row, t.attempts, "n");
    cell(row, t.dead.reason);
    cell(row, t.dead.error);
    const act = cell(row, "", "act");
    const path = "dead/" + encodeURIComponent(t.id);
    button(act, "Replay", "replay", { id: t.id }, async () => { await post(path + "/replay"); row.remove(); },
      "Replay dead task " + t.id + "? It is due now, with its attempts back at 0.");
    button(act, "Purge", "purge", { id: t.id }, async () => { await post(path + "/purge"); row.remove(); },
      "Purge dead task " + t.id + "? Its data is deleted and the id can be enqueued again.");
  }
  deadCursor = page.cursor;
  $("#deadmore").hidden = !page.cursor;
}

// recentQueue is the queue whose recent completions are shown ("" none).
let recentQueue = "";

// resultText renders a base64 result (JSON's []byte) as text, cut to n
// characters.
function resultText(b64, n) {
  if (!b64) return "";
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  let s;
  try { s = new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch { return `(${bytes.length} bytes of binary data)`; }
  return s.length > n ? s.slice(0, n) + "…" : s;
}

// loadRecent draws the recent completions of recentQueue.
async function loadRecent() {
  if (!recentQueue) return;
  const current = fresh("recent");
  const data = await api("recent?" + new URLSearchParams({ queue: recentQueue }));
  if (!current() || !changed("recent", [recentQueue, data])) return;
  const body = $("#recent tbody");
  body.replaceChildren();
  for (const t of data.tasks) {
    const row = body.insertRow();
    row.dataset.id = t.id;
    cell(row, when(t.ended));
    cell(row, t.state);
    cell(row, t.id);
    cell(row, resultText(t.result, 200));
  }
  $("#norecent").hidden = data.tasks.length > 0;
}

// count formats a number with thousands separators, as the CLI does.
function count(n) {
  return Number(n).toLocaleString("en-US");
}

// layoutText sums the layout record up as `hourglass shards` does.
function layoutText(l) {
  const head = `generation ${l.generation}, ${l.shards} shards, `;
  switch (l.state) {
    case "": return head + "stable (never resized)";
    case "stable": return head + "stable" + (l.finished ? `; the last change ended ${when(l.finished)}, ${count(l.moved)} tasks moved` : "");
    case "preparing": return head + `preparing ${l.from} -> ${l.shards}: writing the new layout into every shard`;
  }
  const secs = (Date.now() - new Date(l.started).getTime()) / 1000;
  const rate = secs > 0 ? `, ${count(Math.round(l.moved / secs))} tasks/s since ${when(l.started)}` : "";
  const left = (l.pending || []).reduce((n, p) => n + p.tasks, 0);
  return head + `${l.state} ${l.from} -> ${l.shards}: ${l.done.length}/${l.span} shards done, ${count(l.moved)} tasks moved` +
    rate + (l.pending ? `; at most ${count(left)} tasks left in ${l.pending.length} old shards` : "");
}

async function loadShards() {
  const current = fresh("shards");
  const data = await api("shards");
  if (!current() || !changed("shards", data)) return;
  const l = data.layout;
  $("#layout").textContent = layoutText(l);
  $("#layout").dataset.state = l.state;
  // What the old shards not done yet wait for: queues with tasks in
  // flight there (ready ones nobody takes keep a change open until a
  // scheduler moves them, docs/resharding.md).
  const wait = $("#layoutwait");
  wait.replaceChildren();
  for (const p of l.pending || []) {
    if (p.problem) {
      const li = document.createElement("li");
      li.textContent = `shard ${p.shard}: unreadable: ${p.problem}`;
      wait.appendChild(li);
    }
    for (const q of p.waiting || []) {
      const li = document.createElement("li");
      li.dataset.shard = p.shard;
      li.dataset.queue = q.queue;
      const notes = [];
      if (q.paused) notes.push("paused");
      if (q.oldest_ready) notes.push("oldest ready since " + when(q.oldest_ready));
      li.textContent = `shard ${p.shard} waits for queue ${q.queue}: ${count(q.ready)} ready` +
        (notes.length ? ` (${notes.join(", ")})` : "") + `, ${count(q.in_flight)} in flight`;
      wait.appendChild(li);
    }
  }
  const bar = $("#layoutprogress");
  bar.hidden = l.state !== "resharding" && l.state !== "preparing";
  bar.max = l.span;
  bar.value = l.done.length;
  $("#deployment").textContent = `namespace ${namespace}, ${l.shards} shards`;
  $("#shardwarn").textContent = data.warning || "";
  const body = $("#shards tbody");
  body.replaceChildren();
  for (const s of data.shards) {
    const row = body.insertRow();
    cell(row, s.shard, "n");
    cell(row, s.owner || "-");
    cell(row, s.epoch || "-", "n");
    if (s.problem) {
      row.dataset.problem = "1";
      const td = cell(row, "unreadable: " + s.problem, "warn");
      td.colSpan = 4;
    } else {
      counts(row, s.counts);
    }
  }
}

async function loadStats() {
  const s = await api("stats");
  const now = Date.now();
  let rate = "…";
  if (lastMoved && now > lastMoved.at && s.moved_total >= lastMoved.total) {
    rate = ((s.moved_total - lastMoved.total) * 1000 / (now - lastMoved.at)).toFixed(1);
  }
  lastMoved = { at: now, total: s.moved_total };
  $("#stats").textContent = `moved ${rate} tasks/s (${s.moved_total} since start); ` +
    `move lateness p50 ${s.lateness_p50_ms.toFixed(1)} ms, p99 ${s.lateness_p99_ms.toFixed(1)} ms`;
}

// text decodes a base64 payload as UTF-8 text, or describes it as
// binary. The server sends at most the first 64 KiB of it; size is the
// whole payload's length, and a cut payload says so (a character the cut
// split is left out, not taken for binary).
function text(b64, size) {
  const bytes = Uint8Array.from(atob(b64 || ""), (c) => c.charCodeAt(0));
  const cut = size > bytes.length;
  const note = cut ? `\n(the first ${count(bytes.length)} of ${count(size)} bytes; hourglass task show ID -o json prints all)` : "";
  try { return new TextDecoder("utf-8", { fatal: true }).decode(bytes, { stream: cut }) + note; }
  catch (e) { return `(binary, ${count(size)} bytes)`; }
}

async function lookup(id) {
  const current = fresh("task");
  try {
    const t = await api("task?id=" + encodeURIComponent(id));
    if (!current()) return;
    shownTask = t.id;
    $("#task").textContent = JSON.stringify({ ...t, payload: text(t.payload, t.payload_size) }, null, 2);
    $("#taskcancel").hidden = t.state === "cancelled";
    // Only a pending task can change: scheduled, or ready and not taken.
    const pending = t.state === "scheduled" || t.state === "ready";
    $("#taskreschedule").hidden = !pending;
    $("#taskreplace").hidden = !pending;
  } catch (e) {
    if (!current()) return;
    shownTask = "";
    $("#task").textContent = e.message;
    for (const el of ["#taskcancel", "#taskreschedule", "#taskreplace"]) $(el).hidden = true;
  }
}

async function refreshOnce() {
  try {
    await Promise.all([loadQueues(), loadProcesses(), loadSchedules(), loadShards(), loadStats(), deadPaged ? null : loadDead(false), loadRecent()]);
    status("updated " + when(new Date().toISOString()).slice(11));
  } catch (e) {
    status("refresh failed: " + e.message, true);
  }
}

// refresh runs one refresh at a time: asked for while one runs, it runs
// once more after it.
let running = null;
let again = false;
function refresh() {
  if (running) { again = true; return running; }
  running = (async () => {
    do { again = false; await refreshOnce(); } while (again);
    running = null;
  })();
  return running;
}

async function loop() {
  await refresh();
  setTimeout(loop, refreshEvery);
}

async function start() {
  const cfg = await api("config");
  readOnly = cfg.read_only;
  namespace = cfg.namespace;
  document.body.classList.toggle("readonly", readOnly);
  $("#mode").hidden = !readOnly;
  $("#deployment").textContent = `namespace ${cfg.namespace}, ${cfg.shards} shards`;
  $("#deadfilter").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    deadFilter = new URLSearchParams();
    for (const k of ["queue", "reason", "error"]) if (f.get(k)) deadFilter.set(k, f.get(k));
    delete drawn.dead;
    guarded("filter", () => loadDead(false));
  });
  // Bulk actions on every dead letter the applied filter matches.
  const filterText = () => deadFilter.toString() ? "matching " + [...deadFilter].map(([k, v]) => k + " " + JSON.stringify(v)).join(", ") : "(no filter: all of them)";
  // bulk sends the action until the server says nothing is left: it does
  // a large set in parts of a few seconds each ("more").
  const bulk = (op) => async () => {
    const q = new URLSearchParams(deadFilter);
    if (!q.toString()) q.set("all", "1");
    let done = 0, scanned = 0, a;
    do {
      a = await post("deadall/" + op + "?" + q);
      q.set("until", a.until); // the next parts leave out what died since the first
      done += a.done;
      scanned += a.scanned;
      if (a.more) status(`${op === "replay" ? "Replaying" : "Purging"}: ${done} so far…`);
    } while (a.more && a.done > 0); // a part that did nothing ends it
    delete drawn.dead;
    deadPaged = false;
    return `${op === "replay" ? "Replayed" : "Purged"} ${done} of ${scanned} dead letters examined`;
  };
  button($("#deadbulk"), "Replay all", "replayall", {}, bulk("replay"),
    () => "Replay every dead letter " + filterText() + "? They are due now, with their attempts back at 0.");
  button($("#deadbulk"), "Purge all", "purgeall", {}, bulk("purge"),
    () => "Purge every dead letter " + filterText() + "? Their data is deleted.");
  $("#recentqueue").addEventListener("submit", (e) => {
    e.preventDefault();
    recentQueue = new FormData(e.target).get("queue");
    delete drawn.recent;
    guarded("recent", loadRecent);
  });
  const more = $("#deadmore");
  more.addEventListener("click", async () => {
    if (more.disabled) return;
    more.disabled = true;
    await guarded("more", () => loadDead(true));
    more.disabled = false;
  });
  $("#weightsqueue").addEventListener("submit", (e) => {
    e.preventDefault();
    weightsQueue = new FormData(e.target).get("queue");
    guarded("weights", loadWeights);
  });
  $("#keyweight").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const q = weightsQueue, key = f.get("key"), w = f.get("weight");
    if (!q) { status("show a queue's weights first", true); return; }
    const what = w === "0" ? "Pause key " + JSON.stringify(key) + " of queue " + q + "? Its tasks wait until it gets a weight above 0."
      : "Give key " + JSON.stringify(key) + " of queue " + q + " " + w + " turns a round?";
    if (!confirmed("Set weight", what)) return;
    guarded("set weight", async () => {
      await post("queues/" + encodeURIComponent(q) + "/weight?key=" + encodeURIComponent(key) + "&weight=" + encodeURIComponent(w));
      status("set the weight of " + JSON.stringify(key) + " of " + q + " to " + w);
      await loadWeights();
    });
  });
  $("#keycap").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const q = weightsQueue, key = f.get("key"), c = f.get("cap");
    if (!q) { status("show a queue's keys first", true); return; }
    const what = c === "" ? "Give key " + JSON.stringify(key) + " of queue " + q + " the queue's cap again?"
      : c === "0" ? "Lift every cap of key " + JSON.stringify(key) + " of queue " + q + "?"
      : "Let at most " + c + " tasks of key " + JSON.stringify(key) + " of queue " + q + " run at once?";
    if (!confirmed("Set cap", what)) return;
    guarded("set cap", async () => {
      await post("queues/" + encodeURIComponent(q) + "/keycap?key=" + encodeURIComponent(key) + "&concurrency=" + encodeURIComponent(c === "" ? "default" : c));
      status("set the cap of " + JSON.stringify(key) + " of " + q + " to " + (c === "" ? "the queue's" : c));
      await loadWeights();
    });
  });
  $("#keyrate").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    const q = weightsQueue, key = f.get("key"), r = f.get("rate"), per = f.get("period") || "1s", b = f.get("burst") || "1", kind = f.get("kind") || "token_bucket";
    if (!q) { status("show a queue's keys first", true); return; }
    const what = r === "" ? "Give key " + JSON.stringify(key) + " of queue " + q + " the queue's rate again?"
      : r === "0" ? "Lift every rate of key " + JSON.stringify(key) + " of queue " + q + "?"
      : "Let at most " + r + " tasks of key " + JSON.stringify(key) + " of queue " + q + " start per " + per + " by a " + kind.replace("_", " ") + (kind === "token_bucket" ? ", bursts of " + b : "") + "?";
    if (!confirmed("Set rate", what)) return;
    guarded("set rate", async () => {
      const args = r === "" ? "&rate=default" : "&rate=" + encodeURIComponent(r) + (r === "0" ? "" : "&period=" + encodeURIComponent(per) + "&kind=" + encodeURIComponent(kind) + (kind === "token_bucket" ? "&burst=" + encodeURIComponent(b) : ""));
      await post("queues/" + encodeURIComponent(q) + "/keyrate?key=" + encodeURIComponent(key) + args);
      status("set the rate of " + JSON.stringify(key) + " of " + q);
      await loadWeights();
    });
  });
  $("#lookup").addEventListener("submit", (e) => {
    e.preventDefault();
    lookup(new FormData(e.target).get("id"));
  });
  $("#taskcancel").addEventListener("click", () => {
    const id = shownTask;
    if (!id || !confirmed("Cancel task", "Cancel task " + id + "? It never runs (again); a running handler is told to stop.")) return;
    guarded("cancel", async () => { await post("tasks/" + encodeURIComponent(id) + "/cancel"); status("cancelled " + id); await lookup(id); });
  });
  $("#taskreschedule").addEventListener("submit", (e) => {
    e.preventDefault();
    const id = shownTask;
    const at = new FormData(e.target).get("at");
    if (!id || !confirmed("Reschedule task", "Reschedule task " + id + " to " + at + "?")) return;
    guarded("reschedule", async () => {
      await post("tasks/" + encodeURIComponent(id) + "/reschedule?at=" + encodeURIComponent(at));
      status("rescheduled " + id);
      await lookup(id);
    });
  });
  $("#taskreplace").addEventListener("submit", (e) => {
    e.preventDefault();
    const id = shownTask;
    const payload = new FormData(e.target).get("payload");
    if (!id || !confirmed("Replace payload", "Replace the payload of task " + id + "?")) return;
    guarded("replace", async () => {
      await post("tasks/" + encodeURIComponent(id) + "/replace", payload);
      status("replaced the payload of " + id);
      await lookup(id);
    });
  });
  loop();
}

start().catch((e) => status("cannot load: " + e.message, true));

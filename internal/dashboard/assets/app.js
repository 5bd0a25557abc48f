// Hourglass dashboard: reads /ui/api/*, refreshes every 3 s, and sends
// changes as POST with the X-Hourglass-UI header (the server refuses
// changes without it, and all of them in read-only mode).
"use strict";

const $ = (sel) => document.querySelector(sel);
let readOnly = false;
let deadCursor = "";
let deadPaged = false;
let lookedUp = "";
// The last data each table was drawn from: a refresh that brings the same
// data leaves the table alone, so rows (and a button under the pointer)
// stay put.
const drawn = {};

// changed reports whether key's data differs from the last drawn, and
// remembers it.
function changed(key, data) {
  const s = JSON.stringify(data);
  if (drawn[key] === s) return false;
  drawn[key] = s;
  return true;
}

async function api(path, opts = {}) {
  const res = await fetch("api/" + path, opts);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function post(path) {
  return api(path, { method: "POST", headers: { "X-Hourglass-UI": "1" } });
}

function status(msg, bad) {
  const el = $("#status");
  el.textContent = msg;
  el.className = bad ? "warn" : "";
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// button adds a button that runs run; ask, when given, is a question the
// user must confirm first (destructive actions).
function button(td, label, action, attrs, run, ask) {
  const b = document.createElement("button");
  b.textContent = label;
  b.dataset.action = action;
  for (const [k, v] of Object.entries(attrs)) b.dataset[k] = v;
  b.addEventListener("click", async () => {
    if (ask && !window.confirm(ask)) return;
    try { await run(); status(label + " done"); await refresh(); }
    catch (e) { status(label + " failed: " + e.message, true); }
  });
  td.appendChild(b);
}

function counts(row, c) {
  for (const k of ["scheduled", "ready", "in_flight", "dead"]) cell(row, c[k], "n");
}

async function loadQueues() {
  const data = await api("queues");
  if (!changed("queues", data)) return;
  const body = $("#queues tbody");
  body.replaceChildren();
  for (const q of data.queues) {
    const row = body.insertRow();
    row.dataset.queue = q.name;
    cell(row, q.name || "(no queue)");
    cell(row, q.state, q.state);
    counts(row, q.counts);
    const act = cell(row, "", "act");
    if (q.state === "active") button(act, "Pause", "pause", { queue: q.name }, () => post("queues/" + encodeURIComponent(q.name) + "/pause"));
    if (q.state === "paused") button(act, "Resume", "resume", { queue: q.name }, () => post("queues/" + encodeURIComponent(q.name) + "/resume"));
  }
  const foot = $("#queues tfoot");
  foot.replaceChildren();
  const row = foot.insertRow();
  cell(row, "total");
  cell(row, "");
  counts(row, data.total);
  cell(row, "");
}

function deadQuery() {
  const f = new FormData($("#deadfilter"));
  const q = new URLSearchParams();
  for (const k of ["queue", "reason", "error"]) if (f.get(k)) q.set(k, f.get(k));
  return q;
}

async function loadDead(more) {
  const q = deadQuery();
  if (more) q.set("cursor", deadCursor);
  const page = await api("dead?" + q);
  if (!more && !changed("dead", [q.toString(), page])) return;
  // Once the user pages on, the periodic refresh leaves the list alone
  // (it would fold it back to the first page); Filter starts over.
  deadPaged = more;
  const body = $("#dead tbody");
  if (!more) body.replaceChildren();
  for (const t of page.tasks) {
    const row = body.insertRow();
    row.dataset.id = t.id;
    cell(row, t.id);
    cell(row, t.queue);
    cell(row, new Date(t.dead.at).toLocaleString());
    cell(row, t.attempts, "n");
    cell(row, t.dead.reason);
    cell(row, t.dead.error);
    const act = cell(row, "", "act");
    const id = encodeURIComponent(t.id);
    button(act, "Replay", "replay", { id: t.id }, async () => { await post("dead/" + id + "/replay"); row.remove(); });
    button(act, "Purge", "purge", { id: t.id }, async () => { await post("dead/" + id + "/purge"); row.remove(); },
      "Purge dead task " + t.id + "? Its data is deleted and the id can be enqueued again.");
  }
  deadCursor = page.cursor;
  $("#deadmore").hidden = !page.cursor;
}

async function loadShards() {
  const data = await api("shards");
  if (!changed("shards", data)) return;
  $("#shardwarn").textContent = data.warning || "";
  const body = $("#shards tbody");
  body.replaceChildren();
  for (const s of data.shards) {
    const row = body.insertRow();
    cell(row, s.shard, "n");
    cell(row, s.owner || "-");
    cell(row, s.epoch || "-", "n");
    counts(row, s.counts);
  }
}

async function loadStats() {
  const s = await api("stats");
  const rate = s.moved_per_second < 0 ? "…" : s.moved_per_second.toFixed(1);
  $("#stats").textContent = `moved ${rate} tasks/s (${s.moved_total} since start); move lateness p50 ≤ ${s.lateness_p50_ms} ms, p99 ≤ ${s.lateness_p99_ms} ms`;
}

async function lookup(id) {
  lookedUp = id;
  try {
    const t = await api("task?id=" + encodeURIComponent(id));
    let payload = "";
    try { payload = atob(t.payload || ""); } catch (e) { payload = "(binary)"; }
    $("#task").textContent = JSON.stringify({ ...t, payload }, null, 2);
    $("#taskcancel").hidden = t.state === "active";
  } catch (e) {
    $("#task").textContent = e.message;
    $("#taskcancel").hidden = true;
  }
}

async function refresh() {
  try {
    await Promise.all([loadQueues(), loadShards(), loadStats(), deadPaged ? null : loadDead(false)]);
    status("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    status("refresh failed: " + e.message, true);
  }
}

async function start() {
  const cfg = await api("config");
  readOnly = cfg.read_only;
  document.body.classList.toggle("readonly", readOnly);
  $("#mode").hidden = !readOnly;
  $("#deployment").textContent = `namespace ${cfg.namespace}, ${cfg.shards} shards`;
  $("#deadfilter").addEventListener("submit", (e) => { e.preventDefault(); delete drawn.dead; loadDead(false); });
  $("#deadmore").addEventListener("click", () => loadDead(true));
  $("#lookup").addEventListener("submit", (e) => { e.preventDefault(); lookup(new FormData(e.target).get("id")); });
  $("#taskcancel").addEventListener("click", async () => {
    if (!window.confirm("Cancel task " + lookedUp + "? It is deleted and never runs.")) return;
    try { await post("tasks/" + encodeURIComponent(lookedUp) + "/cancel"); status("cancelled " + lookedUp); lookup(lookedUp); }
    catch (e) { status("cancel failed: " + e.message, true); }
  });
  await refresh();
  setInterval(refresh, 3000);
}

start().catch((e) => status("cannot load: " + e.message, true));

// Hourglass queue page: the history of one queue (?queue=), drawn with
// uPlot from GET /ui/api/history, refreshed every 30 s and when the range
// changes. Times are local, 24-hour, with the zone shown in the header, as
// the CLI shows them. Server data reaches the page through textContent
// and uPlot's canvas only; no inline script or style (the CSP allows
// neither).
"use strict";

const $ = (sel) => document.querySelector(sel);
const queue = new URLSearchParams(location.search).get("queue") || "";
const counters = ["enqueued", "started", "succeeded", "retried", "dead", "cancelled"];
const colors = ["#3366cc", "#7f4fc9", "#2e9e44", "#e08a00", "#c62828", "#8a8f98"];
let since = "1h";
let charts = [];
let request = 0;

const pad = (n) => String(n).padStart(2, "0");

// zone is the browser's offset from UTC, as the CLI prints it.
function zone() {
  const off = -new Date().getTimezoneOffset();
  return (off < 0 ? "-" : "+") + pad(Math.floor(Math.abs(off) / 60)) + ":" + pad(Math.abs(off) % 60);
}

// stamp formats unix seconds as local 24-hour time; with the date when
// the range is longer than a day.
function stamp(s, withDate) {
  const d = new Date(s * 1000);
  const hm = pad(d.getHours()) + ":" + pad(d.getMinutes());
  return withDate ? `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hm}` : hm;
}

function status(msg, bad) {
  const el = $("#status");
  el.textContent = msg;
  el.className = bad ? "warn" : "";
}

// unit formats an axis value of scale sc: ms as "250ms" or "12s",
// seconds as "90s" or "2h", counts as they are.
function unit(sc, v) {
  if (v == null) return "";
  if (sc === "ms") return v >= 1000 ? +(v / 1000).toFixed(1) + "s" : +v.toFixed(1) + "ms";
  if (sc === "s") return v >= 7200 ? +(v / 3600).toFixed(1) + "h" : v >= 120 ? +(v / 60).toFixed(1) + "m" : v + "s";
  return String(v);
}

// options returns a chart's uPlot options: a time axis in local 24-hour
// time, then one series per [label, color, scale].
function options(series, width, long) {
  const scales = [...new Set(series.map((s) => s[2]))];
  const axis = (sc) => ({ scale: sc, size: 64, values: (u, splits) => splits.map((v) => unit(sc, v)) });
  return {
    width, height: 220,
    scales: { x: { time: true } },
    axes: [
      { values: (u, splits) => splits.map((s) => stamp(s, long)) },
      axis(scales[0]),
      ...scales.slice(1).map((sc) => ({ ...axis(sc), side: 1, grid: { show: false } })),
    ],
    series: [
      { value: (u, s) => (s == null ? "-" : stamp(s, true)) },
      ...series.map(([label, stroke, scale]) => ({ label, stroke, scale, width: 1.5, spanGaps: false })),
    ],
  };
}

// draw replaces the charts with data's.
function draw(data) {
  for (const c of charts) c.destroy();
  const width = Math.max(320, $("main").clientWidth - 40);
  const long = since !== "1h" && since !== "6h";
  const x = data.at;
  charts = [
    new uPlot(options(counters.map((k, i) => [k, colors[i], "n"]), width, long),
      [x, ...counters.map((k) => data[k])], $("#throughput")),
    new uPlot(options([["p50", "#3366cc", "ms"], ["p99", "#c62828", "ms"]], width, long),
      [x, data.p50_ms, data.p99_ms], $("#lateness")),
    new uPlot(options([["ready", "#3366cc", "n"], ["oldest ready", "#e08a00", "s"]], width, long),
      [x, data.ready, data.oldest_s], $("#depth")),
  ];
  // The totals are summed from the data the first chart plots.
  const plotted = charts[0].data;
  counters.forEach((k, i) => {
    const sum = plotted[i + 1].reduce((a, b) => a + (b || 0), 0);
    $(`#totals td[data-col="${k}"]`).textContent = String(sum);
  });
  $("#step").textContent = "one point per " + (data.step_s >= 3600 ? data.step_s / 3600 + " h" : data.step_s / 60 + " min");
  document.body.dataset.points = String(x.length);
}

async function load() {
  const n = ++request;
  try {
    const res = await fetch("api/history?queue=" + encodeURIComponent(queue) + "&since=" + since);
    const body = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(body.error || res.statusText);
    if (n !== request) return;
    draw(body);
    status("updated " + stamp(Date.now() / 1000, false));
  } catch (e) {
    if (n === request) status("history failed: " + e.message, true);
  }
}

function start() {
  $("#queue").textContent = queue;
  document.title = "Hourglass: " + queue;
  $("#zone").textContent = "times local, 24-hour, UTC" + zone();
  for (const b of document.querySelectorAll("#range button")) {
    b.addEventListener("click", () => {
      since = b.dataset.since;
      for (const o of document.querySelectorAll("#range button")) o.disabled = o === b;
      load();
    });
  }
  $("#range button").disabled = true;
  load();
  setInterval(load, 30000);
}

start();

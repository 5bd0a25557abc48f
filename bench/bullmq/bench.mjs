// BullMQ side of Hourglass's benchmark, driven by bench/bullmq.go.
//
//   node bench.mjs client HOST:PORT
//     Reads one JSON request a line on stdin and answers each with one JSON
//     line on stdout, in any order (requests carry an id and run
//     concurrently):
//       {"id":1,"op":"add","idx":[..],"due":[..],"payload":16,"bulk":true}
//         enqueues one job per idx, due at due[i] (Unix ms): with
//         Queue.addBulk when bulk, else one Queue.add call after the other;
//         answers {"id":1,"ok":N} or {"id":1,"ok":N,"err":"..."}.
//   node bench.mjs worker HOST:PORT CONCURRENCY
//     Runs a Worker with no-op handlers; prints "ready", then one line
//     "IDX DUE_MS START_MS" a handler start. Ends when stdin closes.
//
// A job's data is the string "IDX:DUE_MS:" padded with x to the payload
// size, as the bench's asynq tasks carry theirs. Completed and failed jobs
// are removed (removeOnComplete/removeOnFail), as asynq and Hourglass
// delete theirs; every other option is BullMQ's default.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';

const QUEUE = 'bench';
const [mode, addr, conc] = process.argv.slice(2);
const [host, port] = addr.split(':');
// BullMQ 6 takes ioredis as an optional peer: in an ES module it wants a
// constructed client (BullMQ duplicates it for its blocking connection).
const connect = () => new Redis({ host, port: Number(port), maxRetriesPerRequest: null });

// now is the wall clock in ms with sub-ms resolution (the Go side's
// time.Now() reads the same clock).
const now = () => performance.timeOrigin + performance.now();

const pad = new Map();
function data(i, due, size) {
  const head = `${i}:${due}:`;
  const n = Math.max(0, size - head.length);
  let p = pad.get(n);
  if (p === undefined) {
    p = 'x'.repeat(n);
    pad.set(n, p);
  }
  return head + p;
}

function out(line) {
  process.stdout.write(line + '\n');
}

async function client() {
  const q = new Queue(QUEUE, {
    connection: connect(),
    defaultJobOptions: { removeOnComplete: true, removeOnFail: true },
  });
  await q.waitUntilReady();
  const version = JSON.parse(readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url))).version;
  out(JSON.stringify({ ready: true, version, node: process.version }));
  const rl = createInterface({ input: process.stdin });
  rl.on('line', async (line) => {
    const req = JSON.parse(line);
    let ok = 0;
    try {
      const t = Date.now();
      if (req.bulk) {
        await q.addBulk(req.idx.map((i, k) => ({
          name: 'b', data: data(i, req.due[k], req.payload), opts: { delay: Math.max(0, req.due[k] - t) },
        })));
        ok = req.idx.length;
      } else {
        for (let k = 0; k < req.idx.length; k++) {
          const i = req.idx[k];
          await q.add('b', data(i, req.due[k], req.payload), { delay: Math.max(0, req.due[k] - Date.now()) });
          ok++;
        }
      }
      out(JSON.stringify({ id: req.id, ok }));
    } catch (e) {
      out(JSON.stringify({ id: req.id, ok, err: String(e && e.message || e) }));
    }
  });
  rl.on('close', async () => {
    await q.close();
    process.exit(0);
  });
}

async function worker() {
  let buf = '';
  const flush = () => {
    if (buf !== '') {
      process.stdout.write(buf);
      buf = '';
    }
  };
  setInterval(flush, 2).unref();
  const w = new Worker(QUEUE, async (job) => {
    const start = now();
    const d = job.data;
    const a = d.indexOf(':');
    const b = d.indexOf(':', a + 1);
    buf += `${d.slice(0, a)} ${d.slice(a + 1, b)} ${start.toFixed(3)}\n`;
    if (buf.length > 1 << 16) flush();
  }, { connection: connect(), concurrency: Number(conc) || 1 });
  w.on('error', (e) => console.error('bullmq worker:', e && e.message || e));
  await w.waitUntilReady();
  out('ready');
  const rl = createInterface({ input: process.stdin });
  rl.on('close', async () => {
    await w.close();
    flush();
    process.exit(0);
  });
}

if (mode === 'client') {
  await client();
} else if (mode === 'worker') {
  await worker();
} else {
  console.error('usage: node bench.mjs client|worker HOST:PORT [CONCURRENCY]');
  process.exit(2);
}

// BullMQ's global rate limiter, for benchmarks/rate_bench.py's accuracy row:
// one queue, `limiter {max, duration}` on 3 worker processes, each start
// timed in the handler with Redis TIME (us) and pushed to one list.
//   node rate.mjs bench --url redis://127.0.0.1:PORT/0 [--rate 500 --seconds 20]
//   node rate.mjs worker --url ... --rate 500        (started by `bench`)
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const QUEUE = "ratebench";
const STARTS = "ratebench:starts";

function parseArgs(argv) {
  const a = { role: argv[0] || "bench", rate: 500, seconds: 20 };
  for (let i = 1; i < argv.length; i++) {
    if (argv[i] === "--url") a.url = argv[++i];
    else if (argv[i] === "--rate") a.rate = Number(argv[++i]);
    else if (argv[i] === "--seconds") a.seconds = Number(argv[++i]);
  }
  const u = new URL(a.url);
  if (!u.port || u.port === "6379") throw new Error(`refusing ${a.url}: use the harness's Redis`);
  a.connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
  return a;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function worker(a) {
  const redis = new IORedis(a.connection);
  const w = new Worker(QUEUE, async () => {
    const [sec, usec] = await redis.time();
    await redis.rpush(STARTS, String(Number(sec) * 1e6 + Number(usec)));
  }, { connection: a.connection, concurrency: 50, limiter: { max: a.rate, duration: 1000 } });
  process.on("SIGTERM", async () => { await w.close(true); process.exit(0); });
}

function mostInWindow(starts, windowUs) {
  let best = 0;
  let j = 0;
  for (let i = 0; i < starts.length; i++) {
    while (starts[j] <= starts[i] - windowUs) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

async function bench(a) {
  const redis = new IORedis(a.connection);
  const queue = new Queue(QUEUE, { connection: a.connection });
  const n = Math.round(a.rate * (a.seconds + 2));
  for (let s = 0; s < n; s += 1000) {
    await queue.addBulk(Array.from({ length: Math.min(1000, n - s) },
      (_, i) => ({ name: "hit", data: { i: s + i }, opts: { removeOnComplete: true } })));
  }
  const self = fileURLToPath(import.meta.url);
  const procs = [0, 1, 2].map(() => spawn(process.execPath,
    [self, "worker", "--url", a.url, "--rate", String(a.rate)], { stdio: "ignore" }));
  while ((await redis.llen(STARTS)) === 0) await sleep(50);
  await sleep((a.seconds + 1.5) * 1000);
  for (const p of procs) p.kill("SIGTERM");
  const starts = (await redis.lrange(STARTS, 0, -1)).map(Number).sort((x, y) => x - y);
  const windows = new Map();
  for (const s of starts) {
    const w = Math.floor((s - starts[0]) / 1e6);
    windows.set(w, (windows.get(w) || 0) + 1);
  }
  const full = [];
  for (let w = 1; w < Math.floor(a.seconds); w++) full.push(windows.get(w) || 0);
  const dev = full.map((c) => Math.round(((c - a.rate) / a.rate) * 10000) / 100);
  console.log(JSON.stringify({ metric: "rate_accuracy_bullmq", rate: a.rate, processes: 3,
    starts: starts.length, windows: full, deviation_pct_min: Math.min(...dev),
    deviation_pct_max: Math.max(...dev), within_3pct: dev.every((d) => Math.abs(d) <= 3),
    most_in_100ms: mostInWindow(starts, 1e5), most_in_1s: mostInWindow(starts, 1e6) }));
  await queue.close();
  redis.disconnect();
}

const args = parseArgs(process.argv.slice(2));
if (args.role === "worker") await worker(args);
else await bench(args);

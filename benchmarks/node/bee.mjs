// bee-queue on Node: the same measurement sequence and JSON-lines output as
// bench.mjs (BullMQ). The harness runs `npm install bee-queue` here first.
//   node bee.mjs bench  --url redis://127.0.0.1:PORT/0 [--n 20000 ...]
//   node bee.mjs worker --url ...        (started by `bench`)
// Settings: bee-queue's defaults (succeeded jobs kept, events sent), the
// producer with isWorker: false; the worker runs queue.process(100, fn).
import { createRequire } from "node:module";
import Queue from "bee-queue";
import IORedis from "ioredis";
import { CONCURRENCY, QUEUE, STAMPS, emit, emitError, flush, measureDrain, measureE2s, nowNs,
  parseArgs, rate, spawnWorker, stopWorker } from "./common.mjs";

const redisOf = (a) => ({ host: a.connection.host, port: a.connection.port });

async function bench(a) {
  await flush(a);
  const sections = new Set(a.sections.split(","));
  const queue = new Queue(QUEUE, { redis: redisOf(a), isWorker: false, getEvents: false });
  await queue.ready();
  const pkg = createRequire(import.meta.url)("bee-queue/package.json");
  emit("info", { version: `${pkg.version} (node ${process.version})`,
    config: `1 worker process, queue.process(${CONCURRENCY}, fn), succeeded jobs kept (default)`,
    bulk_api: "Queue.saveAll", concurrency: CONCURRENCY });
  const left = async () => {
    const h = await queue.checkHealth();
    return h.waiting + h.active;
  };
  if (sections.has("enqueue")) {
    try {
      let n = 0;
      const started = performance.now();
      const deadline = started + a.oneBudget * 1000;
      while (n < a.oneN && performance.now() < deadline) { await queue.createJob({}).save(); n++; }
      emit("enqueue_one", rate(n, (performance.now() - started) / 1000));
    } catch (e) { emitError("enqueue_one", e); }
    await flush(a);
  }
  try {
    const started = performance.now();
    for (let s = 0; s < a.n; s += 1000) {
      const k = Math.min(1000, a.n - s);
      const errors = await queue.saveAll(Array.from({ length: k }, () => queue.createJob({})));
      if (errors.size) throw new Error(`saveAll: ${errors.size} jobs failed`);
    }
    emit("enqueue_bulk", { api: "Queue.saveAll", ...rate(a.n, (performance.now() - started) / 1000) });
  } catch (e) { emitError("enqueue_bulk", e); }
  let child = spawnWorker(a);
  const probe = () => queue.createJob({ probe: true }).save();
  try {
    let drained = true;
    if (sections.has("drain")) {
      try {
        const res = await measureDrain(left, a);
        emit("drain", res);
        drained = res.complete;
      } catch (e) { emitError("drain", e); drained = false; }
    }
    if (sections.has("e2s")) {
      if (!drained) {
        await stopWorker(child);
        await flush(a);
        child = spawnWorker(a);
      }
      try {
        await measureE2s(probe, a, 1, 30);
        emit("e2s", await measureE2s(probe, a, a.e2sN, a.e2sBudget, a.e2sMin));
      } catch (e) { emitError("e2s", e); }
    }
  } finally {
    await stopWorker(child);
    await queue.close();
    await flush(a);
  }
}

async function worker(a) {
  const stamps = new IORedis(a.connection);
  const queue = new Queue(QUEUE, { redis: redisOf(a), getEvents: false });
  queue.process(CONCURRENCY, async (job) => {
    if (job.data.probe) {
      await stamps.rpush(STAMPS, nowNs().toString());
    }
  });
  await queue.ready();
  await new Promise((r) => process.once("SIGTERM", r));
  await queue.close();
  await stamps.quit();
}

const args = parseArgs(process.argv.slice(2));
await (args.role === "worker" ? worker(args) : bench(args));
process.exit(0);

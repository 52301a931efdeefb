// BullMQ on Node: the same measurement sequence as peers/driver.py, the
// same JSON-lines output. The harness runs `npm install bullmq` here first.
//   node bench.mjs bench  --url redis://127.0.0.1:PORT/0 [--n 20000 ...]
//   node bench.mjs worker --url ...        (started by `bench`)
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";
import { CONCURRENCY, QUEUE, STAMPS, emit, emitError, flush, measureDrain, measureE2s, nowNs,
  parseArgs, rate, spawnWorker, stopWorker } from "./common.mjs";

async function bench(a) {
  await flush(a);
  const sections = new Set(a.sections.split(","));
  // BullMQ's ESM build cannot load ioredis by itself: hand it a client
  const queue = new Queue(QUEUE, { connection: new IORedis(a.connection) });
  const pkg = (await import("bullmq/package.json", { with: { type: "json" } })).default;
  emit("info", { version: `${pkg.version} (node ${process.version})`,
    config: `1 worker process, concurrency=${CONCURRENCY} (default 1), completed jobs kept (default)`,
    bulk_api: "Queue.addBulk", concurrency: CONCURRENCY });
  if (sections.has("enqueue")) {
    try {
      let n = 0;
      const started = performance.now();
      const deadline = started + a.oneBudget * 1000;
      while (n < a.oneN && performance.now() < deadline) { await queue.add("noop", {}); n++; }
      emit("enqueue_one", rate(n, (performance.now() - started) / 1000));
    } catch (e) { emitError("enqueue_one", e); }
    await flush(a);
  }
  try {
    const started = performance.now();
    for (let s = 0; s < a.n; s += 1000) {
      const k = Math.min(1000, a.n - s);
      await queue.addBulk(Array.from({ length: k }, () => ({ name: "noop", data: {} })));
    }
    emit("enqueue_bulk", { api: "Queue.addBulk", ...rate(a.n, (performance.now() - started) / 1000) });
  } catch (e) { emitError("enqueue_bulk", e); }
  let child = spawnWorker(a);
  try {
    let drained = true;
    if (sections.has("drain")) {
      try {
        const res = await measureDrain(() => queue.getJobCountByTypes("waiting", "active"), a);
        emit("drain", res);
        drained = res.complete;
      } catch (e) { emitError("drain", e); drained = false; }
    }
    if (sections.has("e2s")) {
      if (!drained) {
        // as in peers/driver.py: a fresh worker on an empty Redis, not a backlog
        await stopWorker(child);
        await flush(a);
        child = spawnWorker(a);
      }
      try {
        await measureE2s(() => queue.add("probe", {}), a, 1, 30);
        emit("e2s", await measureE2s(() => queue.add("probe", {}), a, a.e2sN, a.e2sBudget, a.e2sMin));
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
  const w = new Worker(QUEUE, async (job) => {
    if (job.name === "probe") {
      const t = nowNs();
      await stamps.rpush(STAMPS, t.toString());
    }
  }, { connection: new IORedis(a.connection), concurrency: CONCURRENCY });
  await new Promise((r) => process.once("SIGTERM", r));
  await w.close();
  await stamps.quit();
}

const args = parseArgs(process.argv.slice(2));
await (args.role === "worker" ? worker(args) : bench(args));
process.exit(0);

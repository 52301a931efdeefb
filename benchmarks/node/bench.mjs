// BullMQ on Node: the same measurement sequence as peers/driver.py, the
// same JSON-lines output. The harness runs `npm install bullmq` here first.
//   node bench.mjs bench  --url redis://127.0.0.1:PORT/0 [--n 20000 ...]
//   node bench.mjs worker --url ...        (started by `bench`)
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";
import { CONCURRENCY, QUEUE, STAMPS, emit, flush, nowNs, parseArgs, runSequence }
  from "./common.mjs";

async function bench(a) {
  await flush(a);
  // BullMQ's ESM build cannot load ioredis by itself: hand it a client
  const queue = new Queue(QUEUE, { connection: new IORedis(a.connection) });
  const pkg = (await import("bullmq/package.json", { with: { type: "json" } })).default;
  emit("info", { version: `${pkg.version} (node ${process.version})`,
    config: `1 worker process, concurrency=${CONCURRENCY} (default 1), completed jobs kept (default)`,
    bulk_api: "Queue.addBulk", concurrency: CONCURRENCY });
  await runSequence(a, {
    addOne: () => queue.add("noop", {}),
    addBulk: (k) => queue.addBulk(Array.from({ length: k }, () => ({ name: "noop", data: {} }))),
    bulkApi: "Queue.addBulk",
    left: () => queue.getJobCountByTypes("waiting", "active"),
    probe: () => queue.add("probe", {}),
    close: () => queue.close(),
  });
}

async function worker(a) {
  const stamps = new IORedis(a.connection);
  const w = new Worker(QUEUE, async (job) => {
    if (job.name === "probe") {
      const t = nowNs();
      await stamps.rpush(STAMPS, t.toString());
    }
  }, { connection: new IORedis(a.connection), concurrency: a.concurrency });
  await new Promise((r) => process.once("SIGTERM", r));
  await w.close();
  await stamps.quit();
}

const args = parseArgs(process.argv.slice(2));
await (args.role === "worker" ? worker(args) : bench(args));
process.exit(0);

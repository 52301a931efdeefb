// bee-queue on Node: the same measurement sequence and JSON-lines output as
// bench.mjs (BullMQ). The harness runs `npm install bee-queue` here first.
//   node bee.mjs bench  --url redis://127.0.0.1:PORT/0 [--n 20000 ...]
//   node bee.mjs worker --url ...        (started by `bench`)
// Settings: bee-queue's defaults (succeeded jobs kept, events sent), the
// producer with isWorker: false; the worker runs queue.process(100, fn).
import { createRequire } from "node:module";
import Queue from "bee-queue";
import IORedis from "ioredis";
import { CONCURRENCY, QUEUE, STAMPS, emit, flush, nowNs, parseArgs, runSequence }
  from "./common.mjs";

const redisOf = (a) => ({ host: a.connection.host, port: a.connection.port });

async function bench(a) {
  await flush(a);
  const queue = new Queue(QUEUE, { redis: redisOf(a), isWorker: false, getEvents: false });
  await queue.ready();
  const pkg = createRequire(import.meta.url)("bee-queue/package.json");
  emit("info", { version: `${pkg.version} (node ${process.version})`,
    config: `1 worker process, queue.process(${CONCURRENCY}, fn), succeeded jobs kept (default)`,
    bulk_api: "Queue.saveAll", concurrency: CONCURRENCY });
  await runSequence(a, {
    addOne: () => queue.createJob({}).save(),
    addBulk: async (k) => {
      const errors = await queue.saveAll(Array.from({ length: k }, () => queue.createJob({})));
      if (errors.size) throw new Error(`saveAll: ${errors.size} jobs failed`);
    },
    bulkApi: "Queue.saveAll",
    left: async () => {
      const h = await queue.checkHealth();
      return h.waiting + h.active;
    },
    probe: () => queue.createJob({ probe: true }).save(),
    close: () => queue.close(),
  });
}

async function worker(a) {
  const stamps = new IORedis(a.connection);
  const queue = new Queue(QUEUE, { redis: redisOf(a), getEvents: false });
  queue.process(a.concurrency, async (job) => {
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

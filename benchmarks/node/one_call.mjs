// bee-queue's one job a call (createJob().save(), awaited), as the harness's
// enqueue-one column: rounds of N calls after a warm-up (200 calls unless
// --warmup says), one JSON line per round ({"producer", "calls_per_s"}).
// Run by placement.py.
//   node one_call.mjs --port PORT [--calls 5000] [--rounds 3] [--warmup 200]
import Queue from "bee-queue";

const opt = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const port = opt("port", 0);
const calls = opt("calls", 5000);
const rounds = opt("rounds", 3);
const warmup = opt("warmup", 200);
const queue = new Queue("placement", { redis: { host: "127.0.0.1", port }, isWorker: false,
  getEvents: false });
await queue.ready();
for (let i = 0; i < warmup; i++) await queue.createJob({}).save();
for (let r = 0; r < rounds; r++) {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) await queue.createJob({}).save();
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ producer: "bee-queue", calls_per_s: calls / seconds }));
}
await queue.close();

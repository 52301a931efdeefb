// bee-queue's one job a call (createJob().save(), awaited), as the harness's
// enqueue-one column: rounds of N calls after a warm-up (200 calls unless
// --warmup says), one JSON line per round ({"producer", "calls_per_s"}).
// Run by placement.py.
// --pause S: S seconds after making its queue, before waiting for it to be ready
// and making its first call (start_trace.py).
//   node one_call.mjs --port PORT [--calls 5000] [--rounds 3] [--warmup 200] [--pause 0]
import Queue from "bee-queue";

const opt = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const port = opt("port", 0);
const calls = opt("calls", 5000);
const rounds = opt("rounds", 3);
const warmup = opt("warmup", 200);
const pause = opt("pause", 0); // seconds after the imports and new Queue (untimed)
const mono = () => Number(process.hrtime.bigint()) / 1e9; // CLOCK_MONOTONIC, as Python's
const queue = new Queue("placement", { redis: { host: "127.0.0.1", port }, isWorker: false,
  getEvents: false });
if (pause > 0) await new Promise((r) => setTimeout(r, pause * 1000));
await queue.ready();
for (let i = 0; i < warmup; i++) await queue.createJob({}).save();
for (let r = 0; r < rounds; r++) {
  const t0 = mono();
  for (let i = 0; i < calls; i++) await queue.createJob({}).save();
  const t1 = mono();
  console.log(JSON.stringify({ producer: "bee-queue", calls_per_s: calls / (t1 - t0),
    mono: [t0, t1] }));
}
await queue.close();

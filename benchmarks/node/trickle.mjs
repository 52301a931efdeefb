// bee-queue's producer for benchmarks/trickle_peers.py: one job, then a
// pause of --gap-ms, --n times (bee-queue's createJob().save(), as bee.mjs's
// one-per-call enqueue). Prints "ready" once its queue is ready, starts when
// a line comes on stdin, prints "done" after the last save returned.
//   node trickle.mjs --url redis://127.0.0.1:PORT/0 --n 2000 --gap-ms 1
import Queue from "bee-queue";
import { createInterface } from "node:readline";
import { QUEUE, sleep } from "./common.mjs";

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : dflt;
};
const url = new URL(opt("--url"));
const n = Number(opt("--n", "2000"));
const gapMs = Number(opt("--gap-ms", "1"));
const queue = new Queue(QUEUE, { redis: { host: url.hostname, port: Number(url.port) },
  isWorker: false, getEvents: false });
await queue.ready();
console.log("ready");
const lines = createInterface({ input: process.stdin });
await new Promise((r) => lines.once("line", r));
for (let i = 0; i < n; i++) {
  await queue.createJob({}).save();
  await sleep(gapMs);
}
console.log("done");
lines.close();
await queue.close();
process.exit(0);

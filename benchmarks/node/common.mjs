// What the Node peers share: arguments, JSON-lines output, and the drain and
// enqueue-to-start measurements, the same sequence as peers/driver.py.
import { spawn } from "node:child_process";
import IORedis from "ioredis";

export const QUEUE = "bench";
export const CONCURRENCY = 100;
export const STAMPS = "bench:stamps";

export function parseArgs(argv) {
  const a = { role: "bench", n: 20000, oneN: 5000, oneBudget: 3, e2sN: 300, e2sBudget: 8,
    drainBudget: 30, e2sMin: 1, concN: 20000, concBudget: 3, memN: 100000,
    concurrency: CONCURRENCY, sections: "enqueue,drain,e2s,memory,drain_c1" };
  const names = { "--url": "url", "--n": "n", "--one-n": "oneN", "--one-budget": "oneBudget",
    "--e2s-n": "e2sN", "--e2s-budget": "e2sBudget", "--e2s-min": "e2sMin", "--drain-budget": "drainBudget",
    "--conc-n": "concN", "--conc-budget": "concBudget", "--mem-n": "memN",
    "--concurrency": "concurrency", "--sections": "sections" };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] in names) {
      const key = names[argv[i]];
      a[key] = key === "url" || key === "sections" ? argv[++i] : Number(argv[++i]);
    } else if (argv[i] === "bench" || argv[i] === "worker") {
      a.role = argv[i];
    }
  }
  const u = new URL(a.url);
  if (!u.port || u.port === "6379") throw new Error(`refusing ${a.url}: use the harness's Redis`);
  a.connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
  return a;
}

export const emit = (metric, fields) => console.log(JSON.stringify({ metric, ...fields }));
export const emitError = (metric, err) => emit(metric, { error: String(err).slice(0, 500) });
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// wall-clock ns with sub-ms precision, comparable across processes
export const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));
// CLOCK_MONOTONIC in s, as Python's time.monotonic(): run.py places a section's
// processes over its "mono" window (sched_trace.py); tid: the main thread's, the client
export const monoNow = () => Number(process.hrtime.bigint()) / 1e9;
// a rate measured over the s seconds that end now
export const rate = (n, s) => ({ value: Math.round((n / Math.max(s, 1e-9)) * 10) / 10, n,
  seconds: Math.round(s * 1000) / 1000, mono: [monoNow() - s, monoNow()], tid: process.pid });

function percentile(sorted, p) {
  const rank = Math.max(1, Math.min(sorted.length, Math.ceil((p * sorted.length) / 100)));
  return sorted[rank - 1];
}

export async function flush(a) {
  const r = new IORedis(a.connection);
  await r.flushall();
  await r.quit();
}

// the redis-server's CPU seconds so far (INFO cpu: user + sys)
async function redisCpu(r) {
  const info = await r.info("cpu");
  const field = (k) => Number(info.match(new RegExp(`^${k}:([0-9.]+)`, "m"))[1]);
  return field("used_cpu_user") + field("used_cpu_sys");
}

export async function usedMemory(a) {
  const r = new IORedis(a.connection);
  try {
    return Number((await r.info("memory")).match(/^used_memory:(\d+)/m)[1]);
  } finally {
    await r.quit();
  }
}

// left: async () => jobs not finished (waiting + active). As common.measure_drain:
// the redis-server's CPU over the measured window, % of one core and µs per job.
export async function measureDrain(left, a) {
  const r = new IORedis(a.connection);
  try {
    const deadline = performance.now() + a.drainBudget * 1000;
    let tFirst = 0, leftFirst = a.n, cpu0 = 0;
    const withCpu = async (res) => {
      const cpu = await redisCpu(r) - cpu0;
      return { ...res, redis_cpu_pct: Math.round(1000 * cpu / res.seconds) / 10,
        redis_us_per_job: res.measured_jobs ? Math.round(1e8 * cpu / res.measured_jobs) / 100
          : null };
    };
    for (;;) {
      const l = await left();
      const t = performance.now();
      if (!tFirst && l < a.n) { tFirst = t; leftFirst = l; cpu0 = await redisCpu(r); }
      if (l === 0 && tFirst) return withCpu(drainResult(a.n, leftFirst, tFirst, 0, t, true));
      if (t > deadline) {
        if (!tFirst) throw new Error(`no job finished within ${a.drainBudget} s`);
        return withCpu(drainResult(a.n, leftFirst, tFirst, l, t, false));
      }
      await sleep(5);
    }
  } finally {
    await r.quit();
  }
}

// as common.concurrent_enqueue: CONC_TASKS promises, each awaiting one
// enqueue at a time in a loop, until n jobs are in or the budget is spent
export const CONC_TASKS = 100;
export async function concurrentEnqueue(addOne, n, budget) {
  let done = 0;
  const started = performance.now();
  const deadline = started + budget * 1000;
  const loop = async () => {
    while (done < n && performance.now() < deadline) { done++; await addOne(); }
  };
  await Promise.all(Array.from({ length: CONC_TASKS }, loop));
  return { ...rate(done, (performance.now() - started) / 1000), tasks: CONC_TASKS };
}

function drainResult(n, leftFirst, tFirst, leftLast, tLast, complete) {
  const done = leftFirst - leftLast;
  const s = Math.max((tLast - tFirst) / 1000, 1e-9);
  const mono = monoNow() - performance.now() / 1000; // performance.now()'s 0 on that clock
  return { value: Math.round((done / s) * 10) / 10, n, measured_jobs: done,
    seconds: Math.round(s * 1000) / 1000, complete,
    mono: [mono + tFirst / 1000, mono + tLast / 1000] };
}

let rngState = 7;
function rand() { // small deterministic LCG: the same probe gaps every run
  rngState = (rngState * 1103515245 + 12345) % 2147483648;
  return rngState / 2147483648;
}

// add: async () => enqueue one probe job
export async function measureE2s(add, a, count, budget, minN = 1) {
  const r = new IORedis(a.connection);
  await r.del(STAMPS);
  const samples = [];
  const probes = []; // each probe's [start on CLOCK_MONOTONIC, ns]: run.py places it
  const started = performance.now();
  const monoStart = monoNow();
  // as common.more_probes(): a slow (polling) worker may take 12 s for minN probes
  const more = () => {
    const elapsed = (performance.now() - started) / 1000;
    return samples.length < count && (elapsed < budget || (samples.length < minN && elapsed < 12));
  };
  try {
    while (more()) {
      const t0 = nowNs();
      const mono = monoNow();
      await add();
      const got = await r.blpop(STAMPS, Math.max(2, budget));
      if (!got) break;
      const lat = Number(BigInt(got[1]) - t0);
      samples.push(lat);
      probes.push([Math.round(mono * 1e6) / 1e6, lat]);
      // same rule as common.gap(): a slow start means a poller, so spread
      const slowest = Math.max(...samples);
      const extra = slowest > 20e6 ? rand() * slowest / 1e6 : 0;
      await sleep(2 + rand() * 10 + extra);
    }
  } finally {
    await r.quit();
  }
  if (!samples.length) throw new Error("no probe job started");
  samples.sort((x, y) => x - y);
  return { n: samples.length, p50_ms: percentile(samples, 50) / 1e6,
    p99_ms: percentile(samples, 99) / 1e6,
    mono: [monoStart, monoNow()], tid: process.pid, probes };
}

// the worker role of the calling script (argv[1]), at that concurrency
export function spawnWorker(a, concurrency = CONCURRENCY) {
  return spawn(process.execPath,
    [process.argv[1], "worker", "--url", a.url, "--concurrency", String(concurrency)],
    { stdio: "ignore" });
}

export async function stopWorker(child) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  const t = setTimeout(() => child.kill("SIGKILL"), 5000);
  await exited;
  clearTimeout(t);
}


// The sequence every Node peer goes through, as peers/driver.py: enqueue one
// per call, then from 100 concurrent promises, used_memory per queued job,
// bulk enqueue, then a worker process drains and serves the enqueue-to-start
// probes. peer: { addOne, addBulk(k), bulkApi, left, probe, close }.
export async function runSequence(a, peer) {
  const sections = new Set(a.sections.split(","));
  if (sections.has("enqueue")) {
    try {
      let n = 0;
      const started = performance.now();
      const deadline = started + a.oneBudget * 1000;
      while (n < a.oneN && performance.now() < deadline) { await peer.addOne(); n++; }
      emit("enqueue_one", rate(n, (performance.now() - started) / 1000));
    } catch (e) { emitError("enqueue_one", e); }
    await flush(a);
    try {
      emit("enqueue_concurrent", await concurrentEnqueue(peer.addOne, a.concN, a.concBudget));
    } catch (e) { emitError("enqueue_concurrent", e); }
    await flush(a);
  }
  if (sections.has("memory")) {
    // used_memory bytes per queued no-op job, put in with the bulk call
    try {
      const before = await usedMemory(a);
      for (let s = 0; s < a.memN; s += 1000) await peer.addBulk(Math.min(1000, a.memN - s));
      const after = await usedMemory(a);
      emit("memory_per_job", { value: Math.round(10 * (after - before) / a.memN) / 10,
        n: a.memN, used_memory_before: before, used_memory_after: after });
    } catch (e) { emitError("memory_per_job", e); }
    await flush(a);
  }
  try {
    const started = performance.now();
    for (let s = 0; s < a.n; s += 1000) await peer.addBulk(Math.min(1000, a.n - s));
    emit("enqueue_bulk", { api: peer.bulkApi, ...rate(a.n, (performance.now() - started) / 1000) });
  } catch (e) { emitError("enqueue_bulk", e); }
  let child = spawnWorker(a);
  try {
    let drained = true;
    if (sections.has("drain")) {
      try {
        const res = await measureDrain(peer.left, a);
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
        await measureE2s(peer.probe, a, 1, 30);
        emit("e2s", await measureE2s(peer.probe, a, a.e2sN, a.e2sBudget, a.e2sMin));
      } catch (e) { emitError("e2s", e); }
    }
    if (sections.has("drain_c1")) {
      // as lq_bench.py's drain_c1: the same n jobs, one worker process at concurrency 1
      await stopWorker(child);
      await flush(a);
      try {
        for (let s = 0; s < a.n; s += 1000) await peer.addBulk(Math.min(1000, a.n - s));
        child = spawnWorker(a, 1);
        emit("drain_c1", { concurrency: 1, ...await measureDrain(peer.left, a) });
      } catch (e) { emitError("drain_c1", e); }
    }
  } finally {
    await stopWorker(child);
    await peer.close();
    await flush(a);
  }
}

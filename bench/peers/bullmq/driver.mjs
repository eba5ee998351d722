// BullMQ under bench.compare's protocol (bench/peers/protocol.py says it in full): one Node
// process, one Queue, one Worker with `concurrency: C`, otherwise BullMQ's defaults.
import { createInterface } from 'node:readline';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

const BATCH = 500; // jobs per addBulk call, as bench.queue enqueues 500 per call
const SETTLE_MS = 500; // as bench.queue lets its daemon settle before the resume

const cfg = JSON.parse(process.argv[2]);
const input = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const emit = (phase, row = {}) => process.stdout.write(`${JSON.stringify({ phase, ...row })}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function expect(word) {
  const { value } = await input.next();
  if (value?.trim() !== word) throw new Error(`expected ${word} on stdin, got ${value}`);
}

async function serverMs(redis) {
  const [seconds, micros] = await redis.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

// Finishes as the worker reports them (BullMQ's own finishedOn), and handler-call lateness.
const tally = { done: 0, lastFinishMs: 0, lateness: { spread: [], burst: [] }, waiters: [] };

function finished(job) {
  tally.done += 1;
  tally.lastFinishMs = Math.max(tally.lastFinishMs, job.finishedOn);
  for (const w of tally.waiters) if (tally.done >= w.count) w.resolve();
}

function until(count) {
  if (tally.done >= count) return Promise.resolve();
  return new Promise((resolve) => tally.waiters.push({ count, resolve }));
}

async function addAll(queue, jobs) {
  for (let i = 0; i < jobs.length; i += BATCH) await queue.addBulk(jobs.slice(i, i + BATCH));
}

// The same due instants as bench.queue: one every spread_ms/late_jobs ms, or all at once.
function dueInstants(phase, startMs) {
  const step = phase === 'spread' ? cfg.spread_ms / cfg.late_jobs : 0;
  return Array.from({ length: cfg.late_jobs }, (_, i) => startMs + Math.floor(i * step));
}

// `timestamp` pinned to the instant the delay is counted from, so BullMQ's due instant
// (timestamp + delay) is exactly `due`.
function delayedJob(phase, due, now) {
  return { name: 'noop', data: { phase, due }, opts: { timestamp: now, delay: due - now } };
}

async function latePhases(queue, redis) {
  const enqueueMs = {};
  for (const phase of ['spread', 'burst']) {
    const target = tally.done + cfg.late_jobs;
    const due = dueInstants(phase, (await serverMs(redis)) + cfg.lead_ms);
    const began = performance.now();
    for (let i = 0; i < due.length; i += BATCH) {
      const now = Date.now();
      await queue.addBulk(due.slice(i, i + BATCH).map((d) => delayedJob(phase, d, now)));
    }
    enqueueMs[phase] = Math.round((performance.now() - began) * 10) / 10;
    await until(target);
  }
  emit('lateness', { ...tally.lateness, enqueue_ms: enqueueMs });
}

async function startWorker() {
  const handler = async (job) => {
    const { phase, due } = job.data;
    if (phase !== undefined) tally.lateness[phase].push(Date.now() - due);
  };
  const worker = new Worker(cfg.queue, handler, { connection, concurrency: cfg.concurrency });
  worker.on('completed', finished);
  await worker.waitUntilReady();
  await sleep(SETTLE_MS);
  return worker;
}

const connection = new IORedis(cfg.url, { maxRetriesPerRequest: null });

async function main() {
  const queue = new Queue(cfg.queue, { connection });
  await queue.waitUntilReady();
  await queue.pause(); // jobs still go in while paused; the worker takes none
  emit('ready');
  await expect('enqueue');
  await addAll(queue, Array.from({ length: cfg.jobs }, () => ({ name: 'noop', data: {} })));
  emit('enqueued');
  await expect('start');
  const worker = await startWorker();
  emit('started');
  await expect('go');
  await queue.resume();
  await until(cfg.jobs);
  emit('processed', { done: tally.done, last_finish_ms: tally.lastFinishMs });
  await expect('late');
  await latePhases(queue, connection);
  await worker.close();
  await queue.close();
  connection.disconnect();
}

await main();

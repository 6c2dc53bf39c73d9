#!/usr/bin/env node
// A persistent exec agent in Node.js that calls its worker: a journaled
// step, a message, then its answer (proto-schemas/exec-calls.md). Without a
// package: a few lines of protocol. A call is a line on stdout with a `call`
// id of ours and the request's id as `task`; its result comes back on stdin
// with the same `call` id. When the task runs again (after a kill -9, say),
// the worker answers the recorded step with its value instead of `run`.
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";

const waiting = new Map(); // call id -> resolve
let calls = 0;

function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n"); // one whole line
}

function call(task, op, fields) {
  const id = `n${++calls}`;
  return new Promise((resolve, reject) => {
    waiting.set(id, (result) => (result.end || result.error ? reject(result) : resolve(result.result)));
    send({ call: id, task, op, ...fields });
  });
}

// A step: the worker says whether to run it or gives its recorded value.
async function step(task, name, fn) {
  const started = await call(task, "step", { name, idempotent: false });
  if (started.recorded) return started.value;
  const value = await fn();
  await call(task, "step_done", { name, value });
  return value;
}

async function handle(request) {
  const text = request.envelope.context.initial_query;
  const order = await step(request.id, "reserve", () => {
    if (process.env.COUNTS) appendFileSync(process.env.COUNTS, "reserve\n");
    return { order: `O-${text.length}`, at: Date.now() };
  });
  await call(request.id, "say", { text: `Reserved ${order.order}.` });
  return { action: "terminate", output: { order: order.order, pid: process.pid } };
}

createInterface({ input: process.stdin, crlfDelay: Infinity }).on("line", (line) => {
  if (!line.trim()) return;
  const message = JSON.parse(line);
  if (message.call !== undefined) {
    waiting.get(message.call)?.(message);
    waiting.delete(message.call);
    return;
  }
  if (!message.calls) {
    send({ id: message.id, reply: { action: "fail", error: "this worker answers no calls" } });
    return;
  }
  handle(message).then(
    (reply) => send({ id: message.id, reply }),
    // `end`: the hop ended at a call (it waits, or failed); send nothing.
    (why) => why.end || send({ id: message.id, reply: { action: "fail", error: String(why.error?.message ?? why), retryable: true } }),
  );
});

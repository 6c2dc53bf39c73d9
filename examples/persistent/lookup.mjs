#!/usr/bin/env node
// A persistent exec agent in Node.js: one process serves every task of its
// worker. Baton writes one JSON request per line on stdin and reads one JSON
// answer per line on stdout, matched by "id" (see proto-schemas/schema/
// exec_request.schema.json and exec_response.schema.json).
import { createInterface } from "node:readline";

const orders = new Map([["ABC-123", "shipped"], ["FLK-204", "delivered"]]);
const delayMs = Number(process.env.LOOKUP_DELAY_MS ?? "0");

function answer(request) {
  const question = request.envelope.context.initial_query;
  const found = [...orders].filter(([order]) => question.includes(order))
    .map(([order, state]) => `${order} is ${state}`);
  const reply = {
    action: "terminate",
    output: { answer: found.join("; ") || "no order found", pid: process.pid },
    say: found.join("; ") || "I found no order number in your message.",
  };
  // One whole line per answer; requests in flight answer in any order.
  process.stdout.write(JSON.stringify({ id: request.id, reply }) + "\n");
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (!line.trim()) return;
  const request = JSON.parse(line);
  setTimeout(() => answer(request), delayMs); // a slow call; others run meanwhile
});

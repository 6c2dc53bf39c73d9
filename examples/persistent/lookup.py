#!/usr/bin/env python3
"""A persistent exec agent in Python: one process serves every task of its
worker. Baton writes one JSON request per line on stdin and reads one JSON
answer per line on stdout, matched by "id" (see proto-schemas/schema/
exec_request.schema.json and exec_response.schema.json).

Expensive set-up (a model, a connection pool, an index) happens once, here
at start, instead of once per task.
"""

import json
import os
import sys
import threading
import time

ORDERS = {"ABC-123": "shipped", "FLK-204": "delivered"}  # the "expensive" state
DELAY = float(os.environ.get("LOOKUP_DELAY_MS", "0")) / 1000
PIDFILE = os.environ.get("LOOKUP_PIDFILE")
if PIDFILE:
    with open(PIDFILE, "w") as f:
        f.write(str(os.getpid()))

write = threading.Lock()


def answer(request):
    envelope = request["envelope"]
    question = envelope["context"]["initial_query"]
    time.sleep(DELAY)  # a slow tool or model call; other requests run meanwhile
    found = [f"{order} is {state}" for order, state in ORDERS.items() if order in question]
    reply = {
        "action": "terminate",
        "output": {"answer": "; ".join(found) or "no order found", "pid": os.getpid()},
        "say": "; ".join(found) or "I found no order number in your message.",
    }
    with write:  # one whole line per answer
        sys.stdout.write(json.dumps({"id": request["id"], "reply": reply}) + "\n")
        sys.stdout.flush()


for line in sys.stdin:
    if line.strip():
        threading.Thread(target=answer, args=(json.loads(line),), daemon=True).start()

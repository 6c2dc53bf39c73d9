#!/usr/bin/env python3
"""lookup.py written with the Python package (sdk/python, import name `baton`):
the same answers, without the protocol by hand. The package reads the
requests, runs each task as an asyncio task, and writes each answer as one
line; a stray print() goes to the worker's log instead of the protocol.

Its spec is lookup_sdk.toml. The package is found through PYTHONPATH (the
spec sets it), after `pip install ./sdk/python`, or, failing both, next to
this example in the repository.
"""

import asyncio
import os
import sys

try:
    import baton
except ImportError:  # run from the repository without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import baton

ORDERS = {"ABC-123": "shipped", "FLK-204": "delivered"}  # the "expensive" state, loaded once
DELAY = float(os.environ.get("LOOKUP_DELAY_MS", "0")) / 1000
PIDFILE = os.environ.get("LOOKUP_PIDFILE")
if PIDFILE:
    with open(PIDFILE, "w") as f:
        f.write(str(os.getpid()))

agent = baton.Agent()


@agent.task
async def lookup(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    question = task.envelope["context"]["initial_query"]
    await asyncio.sleep(DELAY)  # a slow tool or model call; other tasks run meanwhile
    found = [f"{order} is {state}" for order, state in ORDERS.items() if order in question]
    return baton.complete(
        {"answer": "; ".join(found) or "no order found", "pid": os.getpid()},
        say="; ".join(found) or "I found no order number in your message.",
    )


if __name__ == "__main__":
    agent.run()

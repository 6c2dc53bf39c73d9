#!/usr/bin/env python3
"""Publish a Baton task and print its session's events until the terminal one.

A Baton client needs only a NATS client and a MessagePack library:

    pip install nats-py msgpack
    python3 send_task.py --url nats://127.0.0.1:4222 "Where is my order ABC-123?"

Exit status: 0 when the session completed, 1 when it failed, 2 on a timeout.
"""

import argparse
import asyncio
import sys
import time
import uuid

import msgpack
import nats
from nats.js.api import DeliverPolicy

TERMINAL = {"completed", "failed"}


def now_ms() -> int:
    return int(time.time() * 1000)


def make_task(text: str, to: str | None) -> dict:
    """The minimal task of PROTOCOL.md: maps with string keys, ids as uuid strings."""
    at = now_ms()
    task = {
        "v": 1,
        "id": str(uuid.uuid4()),
        "session": str(uuid.uuid4()),
        "kind": "task",
        "path": [],
        "created_at": at,
        "context": {
            "initial_query": text,
            "problem": "",
            "messages": [{"role": "user", "content": text, "at": at}],
            "variables": {},
            "trace": [],
            "state": {},
            "metadata": {},
        },
    }
    if to:
        task["to"] = to
    return task


def describe(event: dict) -> str:
    kind = event.get("type")
    agent = event.get("agent") or "?"
    reason = f" [{event['reason']}]" if event.get("reason") else ""
    if kind == "handoff":
        return f"handoff {agent} -> {event.get('to')}{reason}"
    if kind == "escalated":
        return f"escalated {agent} -> {event.get('to')}{reason}"
    if kind == "completed":
        return f"completed: {event.get('output')}"
    if kind == "failed":
        return f"failed{reason}: {event.get('detail') or ''}"
    detail = f": {event['detail']}" if event.get("detail") else ""
    return f"{kind} {agent}{reason}{detail}"


async def run(args: argparse.Namespace) -> int:
    nc = await nats.connect(args.url)
    try:
        js = nc.jetstream()
        task = make_task(args.text, args.to)
        session = task["session"]
        # Follow the session from its first event, so nothing published before
        # the subscription starts is missed.
        sub = await js.subscribe(
            f"{args.prefix}.events.{session}",
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        await js.publish(
            f"{args.prefix}.ingress",
            msgpack.packb(task, use_bin_type=True),
            headers={"Nats-Msg-Id": task["id"]},
        )
        print(f"session {session}")
        deadline = time.monotonic() + args.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                print("timed out waiting for the session to end", file=sys.stderr)
                return 2
            try:
                msg = await sub.next_msg(timeout=remaining)
            except nats.errors.TimeoutError:
                continue
            event = msgpack.unpackb(msg.data, raw=False)
            print(describe(event))
            if event.get("type") in TERMINAL:
                path = " -> ".join(hop["agent"] for hop in event.get("path") or [])
                print(f"path: {path}")
                return 0 if event["type"] == "completed" else 1
    finally:
        await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("text", help="the user's message")
    parser.add_argument("--url", default="nats://127.0.0.1:4222", help="NATS server URL")
    parser.add_argument("--prefix", default="baton", help="Baton subject prefix")
    parser.add_argument("--to", help="first agent type (default: the router's entry agent)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for the session to end")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Publish a Baton task and print its session's events until the terminal one.

A Baton client needs only a NATS client and a MessagePack library:

    pip install nats-py msgpack
    python3 send_task.py --url nats://127.0.0.1:4222 "Where is my order ABC-123?"
    python3 send_task.py --file report.txt --to summarizer

A task larger than half the server's max_payload goes through the
claim-check (PROTOCOL.md, "Claim-check"): every string of 16 KiB or more is
stored in the BATON_CLAIMS object store under the SHA-256 of its msgpack
encoding, and the envelope lists it in `claims`. Events with a large answer
arrive the same way and are restored before they are printed.

A NATS user under the generated `client` permissions may not read the events
stream: with --through-router it reads the session from the router instead
(PROTOCOL.md, "Reading a session through the router"), one request per page.

Exit status: 0 when the session completed, 1 when it failed, 2 on a timeout.
"""

import argparse
import asyncio
import hashlib
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


MIN_PART = 16 * 1024


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def check_out(task: dict) -> tuple[dict, dict[str, bytes]]:
    """Moves every string of MIN_PART bytes or more out of `task`: returns the
    task with empty strings in their place and a `claims` list, and the
    objects to store, by name."""
    claims, objects = [], {}

    def walk(node, path):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in list(items):
            where = f"{path}/{escape(str(key))}"
            if isinstance(child, str) and len(child.encode()) >= MIN_PART:
                data = msgpack.packb(child, use_bin_type=True)
                name = "sha256-" + hashlib.sha256(data).hexdigest()
                objects[name] = data
                claims.append({"path": where, "object": name, "size": len(data)})
                node[key] = ""
            elif isinstance(child, (dict, list)):
                walk(child, where)

    walk(task, "")
    if claims:
        task["claims"] = claims
    return task, objects


async def store_objects(js, prefix: str, objects: dict[str, bytes]) -> None:
    """Puts each object in the claim-check bucket unless it is there already."""
    from nats.js.api import ObjectStoreConfig

    bucket = f"{prefix.upper().replace('.', '_').replace('-', '_')}_CLAIMS"
    try:
        store = await js.object_store(bucket)
    except nats.js.errors.NotFoundError:
        store = await js.create_object_store(
            bucket, config=ObjectStoreConfig(bucket=bucket, ttl=7 * 24 * 3600)
        )
    for name, data in objects.items():
        try:
            await store.get_info(name)
            continue
        except nats.js.errors.ObjectNotFoundError:
            pass
        await store.put(name, data)


def unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


async def restore(js, prefix: str, payload: dict) -> dict:
    """Puts a claim-checked payload's parts back, in reverse order."""
    claims = payload.pop("claims", None) or []
    if not claims:
        return payload
    bucket = f"{prefix.upper().replace('-', '_')}_CLAIMS"
    store = await js.object_store(bucket)
    for claim in reversed(claims):
        data = (await store.get(claim["object"])).data
        if "sha256-" + hashlib.sha256(data).hexdigest() != claim["object"]:
            raise ValueError(f"object {claim['object']} does not match its name")
        *parents, last = [unescape(s) for s in claim["path"].split("/")[1:]]
        node = payload
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        value = msgpack.unpackb(data, raw=False)
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return payload


def resolve_refs(event: dict) -> dict:
    """Puts back the parts an event keeps once (`refs`, after its claims).

    Each reference names the part left empty (`path`) and the string it
    equals in the same event (`from`), both JSON Pointers.
    """
    kept = []
    for ref in event.pop("refs", None) or []:
        node = event
        try:
            for segment in [unescape(s) for s in ref["from"].split("/")[1:]]:
                node = node[int(segment)] if isinstance(node, list) else node[segment]
        except (KeyError, IndexError, ValueError, TypeError):
            kept.append(ref)
            continue
        *parents, last = [unescape(s) for s in ref["path"].split("/")[1:]]
        target = event
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = node
    if kept:
        event["refs"] = kept
    elif event.get("v") == 2 and "path_from" not in event and "started" not in event:
        event["v"] = 1  # whole again, as a reader of version 1 reads it
    return event


def unfold(event: dict) -> list[dict]:
    """The events a stored event stands for: folded `accepted` and `started` first.

    A worker at `--events full` stores a short hop's `accepted` event inside the
    hop's next event, under `accepted`, a replayable session's `started` event
    under `started` (its context is the carrying event's, with only the first
    `messages` messages), and the `tool_called` events of a program's steps early
    in the hop under `steps`; restore them, in that order, just before that event.
    """
    events = []
    for kind in ("accepted", "started"):
        folded = event.pop(kind, None)
        if not folded:
            continue
        restored = {
            "v": 1,  # it keeps no text once and names no path: version 1
            "id": folded["id"],
            "session": event["session"],
            "at": folded["at"],
            "type": kind,
        }
        for key in ("agent", "instance", "envelope"):
            if key in event:
                restored[key] = event[key]
        if kind == "accepted":
            restored["attempt"] = folded.get("attempt", 1)
            if folded.get("reason"):
                restored["reason"] = folded["reason"]
        else:
            restored["output"] = folded.get("start", {})
            if "context" in event:
                context = dict(event["context"])
                context["messages"] = context.get("messages", [])[: folded.get("messages", 0)]
                restored["context"] = context
        events.append(restored)
    for step in event.pop("steps", None) or []:
        # A program's step early in its hop: its `tool_called` event.
        restored = {"v": 1, "id": step["id"], "session": event["session"], "at": step["at"]}
        restored["type"] = "tool_called"
        for key in ("agent", "instance", "version", "envelope"):
            if key in event:
                restored[key] = event[key]
        restored["detail"] = f"{step['tool']} {step['outcome']} in {step['duration_ms']} ms"
        restored["output"] = {k: step[k] for k in ("tool", "call", "outcome", "duration_ms")}
        events.append(restored)
    if event.get("v") == 2 and not event.get("refs") and "path_from" not in event:
        event["v"] = 1
    return events + [event]


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


async def through_router(nc, prefix: str, session: str):
    """The session's events, read from the router's session service.

    Each request names the session and the last stream sequence read; the
    router answers with the events after it, or waits up to `wait_ms` for the
    next one. An event too large for one answer comes in parts.
    """
    after, part = 0, b""
    while True:
        request = {"after": after, "wait_ms": 5000, "offset": len(part)}
        msg = await nc.request(
            f"{prefix}.session.read.{session}", msgpack.packb(request), timeout=15
        )
        reply = msgpack.unpackb(msg.data, raw=False)
        if reply.get("error"):
            raise RuntimeError(f"the router could not read the session: {reply['error']}")
        if reply.get("part"):
            piece = reply["part"]
            part += piece["bytes"]
            if len(part) >= piece["total"]:
                after = piece["seq"]
                yield msgpack.unpackb(part, raw=False)
                part = b""
            continue
        for read in reply.get("events") or []:
            if read["seq"]:
                after = read["seq"]
            yield read["event"]


async def run(args: argparse.Namespace) -> int:
    nc = await nats.connect(args.url, inbox_prefix=args.inbox_prefix)
    try:
        js = nc.jetstream()
        text = args.text
        if args.file:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
        task = make_task(text, args.to)
        session = task["session"]
        payload = msgpack.packb(task, use_bin_type=True)
        if len(payload) > nc.max_payload // 2:
            task, objects = check_out(task)
            await store_objects(js, args.prefix, objects)
            payload = msgpack.packb(task, use_bin_type=True)
        subject = f"{args.prefix}.agent.{args.to}" if args.direct else f"{args.prefix}.ingress"
        if args.through_router:
            await js.publish(subject, payload, headers={"Nats-Msg-Id": task["id"]})
            print(f"session {session}")
            events = through_router(nc, args.prefix, session)
            try:
                return await asyncio.wait_for(follow(events), args.timeout)
            except asyncio.TimeoutError:
                print("timed out waiting for the session to end", file=sys.stderr)
                return 2
        # Follow the session from its first event, so nothing published before
        # the subscription starts is missed.
        sub = await js.subscribe(
            f"{args.prefix}.events.{session}",
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        await js.publish(subject, payload, headers={"Nats-Msg-Id": task["id"]})
        print(f"session {session}")

        async def stored():
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                try:
                    msg = await sub.next_msg(timeout=deadline - time.monotonic())
                except nats.errors.TimeoutError:
                    continue
                yield await restore(js, args.prefix, msgpack.unpackb(msg.data, raw=False))

        code = await follow(stored())
        if code == 2:
            print("timed out waiting for the session to end", file=sys.stderr)
        return code
    finally:
        await nc.close()


async def follow(events) -> int:
    """Prints each event until the terminal one; 0 completed, 1 failed, 2 no end."""
    async for stored in events:
        for event in unfold(resolve_refs(stored)):
            print(describe(event))
        if event.get("type") in TERMINAL:
            path = " -> ".join(hop["agent"] for hop in event.get("path") or [])
            print(f"path: {path}")
            return 0 if event["type"] == "completed" else 1
    return 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("text", nargs="?", default="", help="the user's message")
    parser.add_argument("--file", help="read the user's message from this file")
    parser.add_argument("--url", default="nats://127.0.0.1:4222", help="NATS server URL")
    parser.add_argument("--prefix", default="baton", help="Baton subject prefix")
    parser.add_argument("--to", help="first agent type (default: the router's entry agent)")
    parser.add_argument("--direct", action="store_true", help="publish to the agent's subject (needs --to), not the ingress")
    parser.add_argument("--inbox-prefix", default="_INBOX", help="prefix of reply subjects (the generated client block allows _INBOX_client)")
    parser.add_argument("--through-router", action="store_true", help="read the session from the router (for users under the generated client permissions)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for the session to end")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Tries, with the official NATS Python client, every way a NATS user could
read Baton sessions whose ids it does not know, and one it knows.

    snoop.py URL PREFIX KNOWN_SESSION [INBOX_PREFIX]

Prints one JSON object: for each attempt, what came back — `denied` (the
server refused the call for this user's permissions), `no_responders`,
`timeout`, or what was read (`subjects`, `messages`, `events`, `error`).
"""

import asyncio
import json
import sys

import msgpack
import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout


async def main(url: str, prefix: str, known: str, inbox: str = "_INBOX") -> dict:
    violations: list[str] = []

    async def on_error(err):
        violations.append(str(err))

    nc = await nats.connect(url, error_cb=on_error, allow_reconnect=False, inbox_prefix=inbox)
    stream = f"{prefix.upper()}_EVENTS"
    claims = f"OBJ_{prefix.upper()}_CLAIMS"
    cancels = f"KV_{prefix.upper()}_CANCELLED"
    results: dict[str, dict] = {}

    def denied_since(seen: int, subject: str) -> bool:
        return any(
            "permissions violation" in v.lower() and subject.lower() in v.lower()
            for v in violations[seen:]
        )

    async def attempt(name: str, subject: str, payload: bytes, read):
        seen = len(violations)
        request = asyncio.ensure_future(nc.request(subject, payload, timeout=3))
        # A refusal comes back at once as -ERR; an answer may take a moment.
        while not request.done():
            await asyncio.sleep(0.02)
            if denied_since(seen, subject):
                request.cancel()
                results[name] = {"outcome": "denied"}
                return
        try:
            results[name] = read(request.result().data)
        except NoRespondersError:
            results[name] = {"outcome": "no_responders"}
        except NatsTimeout:
            results[name] = {"outcome": "denied" if denied_since(seen, subject) else "timeout"}

    def api(data: bytes) -> dict:
        reply = json.loads(data)
        if "error" in reply:
            return {"outcome": "error", "detail": reply["error"].get("description")}
        return {
            "outcome": "read",
            "subjects": len(reply.get("state", {}).get("subjects") or {}),
            "messages": 1 if "message" in reply else 0,
            "consumer": reply.get("name"),
        }

    def direct(data: bytes) -> dict:
        return {"outcome": "read", "messages": 1 if data else 0}

    def service(data: bytes) -> dict:
        reply = msgpack.unpackb(data, raw=False)
        if reply.get("error"):
            return {"outcome": "error", "detail": reply["error"]}
        events = reply.get("events") or []
        return {"outcome": "read", "events": len(events), "types": [e["event"]["type"] for e in events]}

    every = f"{prefix}.events.>"
    await attempt(
        "consumer_on_every_session",
        f"$JS.API.CONSUMER.CREATE.{stream}.snoop.{every}",
        json.dumps({"stream_name": stream, "config": {"name": "snoop", "filter_subject": every,
                                                      "deliver_policy": "all", "ack_policy": "none"}}).encode(),
        api,
    )
    await attempt(
        "consumer_without_filter_in_subject",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        json.dumps({"stream_name": stream, "config": {"deliver_policy": "all", "ack_policy": "none"}}).encode(),
        api,
    )
    await attempt(
        "stream_info_lists_sessions",
        f"$JS.API.STREAM.INFO.{stream}",
        json.dumps({"subjects_filter": ">"}).encode(),
        api,
    )
    await attempt("get_event_by_sequence", f"$JS.API.STREAM.MSG.GET.{stream}", b'{"seq": 1}', api)
    await attempt("direct_get_any_session", f"$JS.API.DIRECT.GET.{stream}.{every}", b"", direct)
    await attempt("get_claim_by_sequence", f"$JS.API.STREAM.MSG.GET.{claims}", b'{"seq": 1}', api)
    await attempt(
        "consumer_on_claims",
        f"$JS.API.CONSUMER.CREATE.{claims}",
        json.dumps({"stream_name": claims, "config": {"deliver_policy": "all", "ack_policy": "none"}}).encode(),
        api,
    )
    await attempt("get_cancel_by_sequence", f"$JS.API.STREAM.MSG.GET.{cancels}", b'{"seq": 1}', api)
    read_all = msgpack.packb({"after": 0})
    for name, token in [("router_read_star", "*"), ("router_read_gt", ">"), ("router_read_not_an_id", "all")]:
        await attempt(name, f"{prefix}.session.read.{token}", read_all, service)
    await attempt("router_read_known", f"{prefix}.session.read.{known}", read_all, service)
    # Core subscriptions to every session's events.
    for name, subject in [("subscribe_every_session", f"{prefix}.events.>"), ("subscribe_live", f"{prefix}.live.*")]:
        seen = len(violations)
        await nc.subscribe(subject)
        await nc.flush()
        await asyncio.sleep(0.3)
        denied = denied_since(seen, subject)
        results[name] = {"outcome": "denied" if denied else "subscribed"}
    await nc.close()
    results["violations"] = {"outcome": "log", "seen": violations}
    return results


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:5]))))

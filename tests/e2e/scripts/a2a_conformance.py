"""Drives `baton a2a serve` with the examples/a2a-tck agents, through the
official A2A Python SDK (a2a-sdk) on one binding, plus raw HTTP for what
the SDK hides (headers, error bodies); prints what it saw as one JSON
object for the e2e test to check.

    a2a_conformance.py URL BINDING     BINDING: JSONRPC or HTTP+JSON

URL is the agent's base (the ingress, or /agents/NAME, with or without a
trailing slash). BATON_A2A_TOKEN, when set, is sent as a bearer token.
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
)
from google.protobuf.json_format import MessageToDict


def headers():
    token = os.environ.get("BATON_A2A_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


async def client(url, binding, streaming):
    config = ClientConfig(
        streaming=streaming,
        httpx_client=httpx.AsyncClient(headers=headers(), timeout=60),
        supported_protocol_bindings=[binding],
        use_client_preference=True,
    )
    return await create_client(url, client_config=config)


def message(prefix, text="hello", context=None, task=None, metadata=None, refs=None):
    msg = Message(message_id=f"{prefix}-{uuid.uuid4()}", role=Role.ROLE_USER, parts=[Part(text=text)])
    if context:
        msg.context_id = context
    if task:
        msg.task_id = task
    if metadata:
        msg.metadata.update(metadata)
    for ref in refs or []:
        msg.reference_task_ids.append(ref)
    return msg


async def send(url, binding, msg):
    """A blocking send: the task or message it answers, as JSON."""
    c = await client(url, binding, streaming=False)
    async for response in c.send_message(SendMessageRequest(message=msg)):
        return MessageToDict(response)


async def stream(url, binding, msg):
    c = await client(url, binding, streaming=True)
    return [MessageToDict(r) async for r in c.send_message(SendMessageRequest(message=msg))]


async def error_of(call):
    try:
        await call
    except Exception as err:  # the SDK's typed errors
        return type(err).__name__
    return None


async def raw(url, binding):
    """What the SDK does not show: card headers, error bodies, versions."""
    base = url.rstrip("/")
    seen = {}
    async with httpx.AsyncClient(headers=headers(), timeout=30) as h:
        card = await h.get(f"{base}/.well-known/agent-card.json")
        etag = card.headers.get("etag")
        again = await h.get(f"{base}/.well-known/agent-card.json", headers={"If-None-Match": etag or ""})
        seen["card"] = {
            "cache_control": card.headers.get("cache-control"),
            "etag": etag,
            "conditional": again.status_code,
            "bindings": [i["protocolBinding"] for i in card.json()["supportedInterfaces"]],
        }
        missing = str(uuid.uuid4())
        body = {"message": {"role": "ROLE_USER", "messageId": "v", "parts": [{"text": "v"}]}}
        if binding == "JSONRPC":
            rpc = lambda method, params: {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            got = (await h.post(url, json=rpc("GetTask", {"id": missing}))).json()
            seen["not_found"] = {"code": got["error"]["code"], "data": got["error"].get("data")}
            plain = await h.post(url, content=b"not json", headers={"Content-Type": "text/plain"})
            seen["content_type"] = plain.json()["error"]["code"]
            version = await h.post(url, json=rpc("SendMessage", body), headers={"A2A-Version": "99.0"})
            seen["version"] = version.json()["error"]
        else:
            got = await h.get(f"{base}/tasks/{missing}")
            seen["not_found"] = {"code": got.status_code, "data": got.json()["error"]["details"]}
            plain = await h.post(f"{base}/message:send", content=b"not json", headers={"Content-Type": "text/plain"})
            seen["content_type"] = plain.status_code
            version = await h.post(f"{base}/message:send", json=body, headers={"A2A-Version": "99.0"})
            seen["version"] = {"code": version.status_code, "data": version.json()["error"]["details"]}
        anonymous = await httpx.AsyncClient(timeout=30).post(
            f"{base}/message:send" if binding != "JSONRPC" else url, json=body
        )
        seen["anonymous"] = anonymous.status_code
    return seen


async def main(url, binding):
    seen = {"raw": await raw(url, binding)}
    seen["complete"] = await send(url, binding, message("tck-complete-task"))
    for scenario in ["text", "file", "file-url", "data"]:
        seen[scenario] = await send(url, binding, message(f"tck-artifact-{scenario}"))
    seen["direct"] = await send(url, binding, message("tck-message-response"))
    seen["reject"] = await send(url, binding, message("tck-reject-task"))
    seen["chunked"] = await stream(url, binding, message("tck-stream-artifact-chunked"))
    # What reached the agent: the message's id, metadata and referenced tasks.
    echo = message("baton-echo", metadata={"locale": "fr"}, refs=[seen["complete"]["task"]["id"]])
    echo.parts.append(Part(raw=b"tck", filename="in.txt", media_type="application/x-unsupported-tck-type"))
    seen["echo"] = {"sent": echo.message_id, "answer": await send(url, binding, echo)}
    # A conversation: the second message of a context is its next turn.
    context = str(uuid.uuid4())
    first = await send(url, binding, message("tck-complete-task", context=context))
    second = await send(url, binding, message("tck-complete-task", context=context))
    c = await client(url, binding, streaming=False)
    listed = await c.list_tasks(ListTasksRequest(context_id=context))
    seen["context"] = {
        "contexts": [first["task"]["contextId"], second["task"]["contextId"]],
        "listed": len(listed.tasks),
        "history0": len((await c.get_task(GetTaskRequest(id=first["task"]["id"], history_length=0))).history),
    }
    # Input required, then cancelled.
    asked = await send(url, binding, message("tck-input-required"))
    cancelled = await c.cancel_task(CancelTaskRequest(id=asked["task"]["id"]))
    seen["input"] = {
        "asked": asked["task"]["status"]["state"],
        "cancelled": MessageToDict(cancelled)["status"]["state"],
        "again": await error_of(c.cancel_task(CancelTaskRequest(id=asked["task"]["id"]))),
        "unknown": await error_of(c.get_task(GetTaskRequest(id=str(uuid.uuid4())))),
    }
    seen["ask"] = await ask(url, binding, c)
    return seen


async def ask(url, binding, c):
    """The exec agent asks, is answered twice on the same task (asking
    again after the first answer), and completes: CORE-HIST-005/006."""
    mark = f"hist-{uuid.uuid4()}"
    first = await send(url, binding, message(f"tck-input-required-{mark}", text="first"))
    task = first["task"]["id"]
    states = [first["task"]["status"]["state"]]
    for prefix, text in [("tck-input-required", "TCK history message 1"), ("tck-complete-task", "TCK history message 2")]:
        answer = await send(url, binding, message(f"{prefix}-{mark}", text=text, task=task))
        states.append(answer["task"]["status"]["state"])
        same = answer["task"]["id"] == task
    got = MessageToDict(await c.get_task(GetTaskRequest(id=task, history_length=10)))
    history = [p.get("text") for m in got.get("history", []) for p in m["parts"] if "text" in p]
    return {"mark": mark, "states": states, "same_task": same, "history": history}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))

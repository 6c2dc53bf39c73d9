"""Drives `baton a2a serve` with the official A2A Python SDK (a2a-sdk) and
prints what it saw as one JSON object, for the e2e tests to check.

    a2a_client.py URL STEP [ARG ...]

Steps:
  card                        the ingress's card and agent type ARG's card
  send AGENT TEXT             blocking SendMessage to /agents/AGENT
  whole AGENT TEXT            the same; the Task or Message it returned, whole
  send_budget AGENT TEXT N    the same, with metadata budget_tokens N (JSON)
  send_meta AGENT TEXT JSON   the same, with the JSON object's fields in metadata
  stream AGENT TEXT           SendStreamingMessage: every stream response
  get ID                      GetTask
  list CONTEXT                ListTasks of CONTEXT
  send_in CONTEXT AGENT TEXT  blocking send in context CONTEXT
  cancel_running AGENT TEXT   returnImmediately, subscribe, CancelTask while
                              subscribed; cancel again; get
  input AGENT TEXT ANSWER     a task that waits for input, then the answer
  input_handoff AGENT TEXT ANSWER TO
                              the same, the answer handed on to agent type TO
  ended ID                    SubscribeToTask on an ended task (an error)
  token TOKEN AGENT TEXT      calls without and with the bearer token
  feedback ID JSON TEXT       a message to task ID with metadata feedback JSON
  callers CONTEXT MINE THEIRS TEXT NEXT
                              the caller with token MINE starts CONTEXT with
                              TEXT; the caller with token THEIRS (and one
                              with no token) try to reach into it; MINE
                              continues it with NEXT

BATON_A2A_TOKEN, when set, is sent as a bearer token on every call. A step
written `rest:STEP` runs STEP with the SDK's HTTP+JSON client instead of its
JSON-RPC one.
"""

import asyncio
import json
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict


def http(token=None):
    token = token if token is not None else os.environ.get("BATON_A2A_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(headers=headers, timeout=60)


BINDING = {"binding": "JSONRPC"}


async def client(url, streaming=True, token=None):
    config = ClientConfig(
        streaming=streaming,
        httpx_client=http(token),
        supported_protocol_bindings=[BINDING["binding"]],
        use_client_preference=True,
    )
    return await create_client(url, client_config=config)


def message(text, context=None, task=None, handoff=None, budget=None, metadata=None):
    msg = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]
    )
    if context:
        msg.context_id = context
    if task:
        msg.task_id = task
    if handoff:
        msg.metadata.update({"handoff": handoff})
    if budget is not None:
        msg.metadata.update({"budget_tokens": budget})
    if metadata is not None:
        msg.metadata.update(metadata)
    return msg


def state(task):
    return TaskState.Name(task.status.state)


def summary(task):
    texts = [p.text for a in task.artifacts for p in a.parts if p.text]
    status_text = [p.text for p in task.status.message.parts if p.text]
    return {
        "id": task.id,
        "context": task.context_id,
        "state": state(task),
        "answer": texts,
        "status": status_text,
        "metadata": MessageToDict(task.metadata),
        "history": len(task.history),
    }


async def send(url, text, context=None, task=None, immediately=False, handoff=None, budget=None, metadata=None):
    c = await client(url, streaming=False)
    request = SendMessageRequest(message=message(text, context, task, handoff, budget, metadata))
    request.configuration.return_immediately = immediately
    async for response in c.send_message(request):
        return summary(response.task)


def describe(response):
    kind = response.WhichOneof("payload")
    if kind == "task":
        return {"kind": "task", "state": state(response.task), "id": response.task.id}
    if kind == "status_update":
        u = response.status_update
        return {
            "kind": "status",
            "state": TaskState.Name(u.status.state),
            "text": [p.text for p in u.status.message.parts],
        }
    if kind == "artifact_update":
        u = response.artifact_update
        return {
            "kind": "artifact",
            "id": u.artifact.artifact_id,
            "name": u.artifact.name,
            "append": u.append,
            "last": u.last_chunk,
            "text": [p.text for p in u.artifact.parts],
        }
    return {"kind": kind}


async def error_of(call):
    try:
        await call
    except Exception as err:  # the SDK's typed errors
        return type(err).__name__
    return None


async def main(url, step, args):
    if step.startswith("rest:"):
        BINDING["binding"] = "HTTP+JSON"
        step = step[len("rest:"):]
    if step == "card":
        async with http() as h:
            ingress = await A2ACardResolver(h, url).get_agent_card()
            agent = await A2ACardResolver(h, f"{url}/agents/{args[0]}").get_agent_card()
        return {
            "ingress": MessageToDict(ingress),
            "agent": MessageToDict(agent),
        }
    if step == "send":
        return await send(f"{url}/agents/{args[0]}", args[1])
    if step == "whole":
        c = await client(f"{url}/agents/{args[0]}", streaming=False)
        async for response in c.send_message(SendMessageRequest(message=message(args[1]))):
            return MessageToDict(response)
    if step == "send_meta":
        try:
            return await send(f"{url}/agents/{args[0]}", args[1], metadata=json.loads(args[2]))
        except Exception as err:  # the SDK's typed errors
            return {"error": type(err).__name__, "message": str(err)}
    if step == "send_budget":
        try:
            return await send(f"{url}/agents/{args[0]}", args[1], budget=json.loads(args[2]))
        except Exception as err:  # the SDK's typed errors
            return {"error": type(err).__name__, "message": str(err)}
    if step == "feedback":
        try:
            return await send(url, args[2], task=args[0], metadata={"feedback": json.loads(args[1])})
        except Exception as err:  # the SDK's typed errors
            return {"error": type(err).__name__, "message": str(err)}
    if step == "say":
        # A message to the ingress in context args[0]; args[2], if any, its metadata.
        metadata = json.loads(args[2]) if len(args) > 2 else None
        try:
            return await send(url, args[1], context=args[0], metadata=metadata)
        except Exception as err:  # the SDK's typed errors
            return {"error": type(err).__name__, "message": str(err)}
    if step == "double":
        # Two messages in context args[0], the second args[3] s after the
        # first, with metadata args[4]: both answers, in the order sent.
        async def second():
            await asyncio.sleep(float(args[3]))
            try:
                return await send(url, args[2], context=args[0], metadata=json.loads(args[4]))
            except Exception as err:  # the SDK's typed errors
                return {"error": type(err).__name__, "message": str(err)}

        first, later = await asyncio.gather(send(url, args[1], context=args[0]), second())
        return {"first": first, "second": later}
    if step == "answer_twice":
        # The answer args[1] to task args[0], sent twice: the answers (or errors).
        async def once():
            try:
                return await send(url, args[1], task=args[0])
            except Exception as err:  # the SDK's typed errors
                return {"error": type(err).__name__, "message": str(err)}

        return {"first": await once(), "again": await once()}
    if step == "post":
        # Messages args[1:] to the ingress in context args[0], each returned
        # at once (not waited for): their task ids, in order.
        ids = []
        for text in args[1:]:
            posted = await send(url, text, context=args[0], immediately=True)
            ids.append(posted["id"])
        return {"ids": ids}
    if step == "send_in":
        return await send(f"{url}/agents/{args[1]}", args[2], context=args[0])
    if step == "stream":
        c = await client(f"{url}/agents/{args[0]}")
        seen = []
        async for response in c.send_message(SendMessageRequest(message=message(args[1]))):
            seen.append(describe(response))
        return {"events": seen}
    if step == "get":
        c = await client(url)
        return summary(await c.get_task(GetTaskRequest(id=args[0])))
    if step == "list":
        c = await client(url)
        listed = await c.list_tasks(ListTasksRequest(context_id=args[0]))
        first = await c.list_tasks(ListTasksRequest(context_id=args[0], page_size=1))
        second = await c.list_tasks(
            ListTasksRequest(context_id=args[0], page_size=1, page_token=first.next_page_token)
        )
        failed = await c.list_tasks(
            ListTasksRequest(context_id=args[0], status=TaskState.TASK_STATE_FAILED)
        )
        return {
            "tasks": [summary(t) for t in listed.tasks],
            "total": listed.total_size,
            "pages": [[t.id for t in first.tasks], [t.id for t in second.tasks]],
            "last_token": second.next_page_token,
            "failed": [t.id for t in failed.tasks],
        }
    if step == "cancel_running":
        started = await send(f"{url}/agents/{args[0]}", args[1], immediately=True)
        c = await client(url)
        seen = []

        async def follow():
            async for response in c.subscribe(SubscribeToTaskRequest(id=started["id"])):
                seen.append(describe(response))

        following = asyncio.create_task(follow())
        await asyncio.sleep(1.0)
        cancelled = await c.cancel_task(CancelTaskRequest(id=started["id"]))
        await asyncio.wait_for(following, 20)
        again = await error_of(c.cancel_task(CancelTaskRequest(id=started["id"])))
        got = await c.get_task(GetTaskRequest(id=started["id"]))
        return {
            "started": started,
            "cancelled": state(cancelled),
            "subscribed": seen,
            "again": again,
            "got": summary(got),
        }
    if step == "input":
        asked = await send(f"{url}/agents/{args[0]}", args[1])
        # Refused, with nothing answered: another context's task, an unknown task.
        elsewhere = await error_of(send(f"{url}/agents/{args[0]}", args[2], context=str(uuid.uuid4()), task=asked["id"]))
        unknown = await error_of(send(f"{url}/agents/{args[0]}", args[2], task=str(uuid.uuid4())))
        answered = await send(f"{url}/agents/{args[0]}", args[2], task=asked["id"])
        again = await error_of(send(f"{url}/agents/{args[0]}", "more", task=asked["id"]))
        return {"asked": asked, "answered": answered, "again": again, "elsewhere": elsewhere, "unknown": unknown}
    if step == "input_handoff":
        asked = await send(f"{url}/agents/{args[0]}", args[1])
        answered = await send(f"{url}/agents/{args[0]}", args[2], task=asked["id"], handoff=args[3])
        return {"asked": asked, "answered": answered}
    if step == "ended":
        c = await client(url)

        async def drain():
            async for _ in c.subscribe(SubscribeToTaskRequest(id=args[0])):
                pass

        missing = await error_of(c.get_task(GetTaskRequest(id=str(uuid.uuid4()))))
        return {"subscribe": await error_of(drain()), "missing": missing}
    if step == "callers":
        context, mine, theirs = args[0], args[1], args[2]

        async def refused(call):
            try:
                await call
            except Exception as err:  # the SDK's typed errors
                return {"error": type(err).__name__, "message": str(err)}
            return None

        def as_caller(token):
            os.environ["BATON_A2A_TOKEN"] = token

        as_caller(mine)
        started = await send(url, args[3], context=context)
        as_caller(theirs)
        c = await client(url)
        seen = {
            "started": started,
            "said": await refused(send(url, "Me too.", context=context)),
            "answered": await refused(send(url, "Yes.", task=started["id"])),
            "got": await refused(c.get_task(GetTaskRequest(id=started["id"]))),
            "cancelled": await refused(c.cancel_task(CancelTaskRequest(id=started["id"]))),
            "listed": len((await c.list_tasks(ListTasksRequest(context_id=context))).tasks),
        }
        as_caller("")
        seen["anonymous"] = await refused(send(url, "Hello.", context=context))
        as_caller(mine)
        c = await client(url)
        seen["own"] = len((await c.list_tasks(ListTasksRequest(context_id=context))).tasks)
        seen["next"] = await send(url, args[4], context=context)
        return seen
    if step == "token":
        without = await error_of(send(f"{url}/agents/{args[1]}", args[2]))
        os.environ["BATON_A2A_TOKEN"] = "wrong"
        wrong = await error_of(send(f"{url}/agents/{args[1]}", args[2]))
        os.environ["BATON_A2A_TOKEN"] = args[0]
        done = await send(f"{url}/agents/{args[1]}", args[2])
        return {"without": without, "wrong": wrong, "with": done}
    raise SystemExit(f"unknown step {step}")


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
    print(json.dumps(result))

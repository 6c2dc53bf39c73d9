#!/usr/bin/env python3
"""A remote A2A agent built with the official A2A Python SDK (a2a-sdk), for
Baton's `kind = "a2a"` agents to call (research.toml).

    python3 remote_agent.py [--port 9999] [--no-streaming]

It researches whatever it is asked, in a second or so. Its answers:
  - a question with "which region" in it: input-required, asking which region;
  - "fail": the task fails;
  - anything else: completed, with the answer as an artifact.
REMOTE_TOKEN, when set, is the bearer token every call must carry, and
REMOTE_API_KEY the X-API-Key header's value (the card stays public). REMOTE_LOG, when set, gets one line per task it starts (its context id), and
"cancelled CONTEXT" per task cancelled, so a test can count them. REMOTE_DELAY_MS sets how long it works (default 300).
It prints "listening on URL" once it serves.
"""
import argparse
import asyncio
import os
import socket

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import PlainTextResponse


class Researcher(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task or new_task_from_user_message(context.message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
            if os.environ.get("REMOTE_LOG"):
                with open(os.environ["REMOTE_LOG"], "a") as log:
                    log.write(f"{task.context_id}\n")
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        question = context.get_user_input()
        await updater.start_work(new_text_message("Looking it up.", task.context_id, task.id))
        await asyncio.sleep(int(os.environ.get("REMOTE_DELAY_MS", "300")) / 1000)
        if "which region" in question.lower():
            await updater.requires_input(
                new_text_message("Which region do you mean: north or south?", task.context_id, task.id)
            )
        elif "fail" in question.lower():
            await updater.failed(new_text_message("the archive is offline", task.context_id, task.id))
        else:
            await updater.add_artifact([new_text_part(f"research on {question}: 3 sources agree")], name="answer")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None and os.environ.get("REMOTE_LOG"):
            with open(os.environ["REMOTE_LOG"], "a") as log:
                log.write(f"cancelled {task.context_id}\n")
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


class Credentials(BaseHTTPMiddleware):
    """Refuses calls without `Authorization: Bearer $REMOTE_TOKEN`, or
    without `X-API-Key: $REMOTE_API_KEY`, when those are set."""

    async def dispatch(self, request, call_next):
        token = os.environ.get("REMOTE_TOKEN")
        key = os.environ.get("REMOTE_API_KEY")
        if request.method == "POST" and (
            (token and request.headers.get("authorization") != f"Bearer {token}")
            or (key and request.headers.get("x-api-key") != key)
        ):
            return PlainTextResponse("unauthorized\n", status_code=401)
        return await call_next(request)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9999, help="0 picks a free port")
    parser.add_argument("--no-streaming", action="store_true", help="the card offers no streaming")
    args = parser.parse_args()
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = AgentCard(
        name="researcher",
        description="Researches a question and answers with sources",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=f"{url}/", protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=not args.no_streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="research", name="research", description="Looks things up", tags=["research"])],
    )
    handler = DefaultRequestHandler(agent_executor=Researcher(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))
    app.add_middleware(Credentials)
    print(f"listening on {url}", flush=True)
    uvicorn.run(app, fd=sock.fileno(), log_level="warning")


if __name__ == "__main__":
    main()

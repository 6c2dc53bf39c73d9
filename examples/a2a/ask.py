#!/usr/bin/env python3
"""Asks a Baton deployment a question over A2A, with the official A2A Python
SDK (a2a-sdk), and prints the task's updates as they stream in.

    python3 ask.py [URL] QUESTION

URL is `baton a2a serve`'s (default http://127.0.0.1:8070): the ingress, or
one agent type at URL/agents/NAME. BATON_A2A_TOKEN, when set, is sent as the
bearer token.
"""
import asyncio
import os
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState


async def main(url, question):
    token = os.environ.get("BATON_A2A_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    config = ClientConfig(httpx_client=httpx.AsyncClient(headers=headers, timeout=300))
    client = await create_client(url, client_config=config)
    message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=question)])
    async for response in client.send_message(SendMessageRequest(message=message)):
        kind = response.WhichOneof("payload")
        if kind == "task":
            print(f"task {response.task.id}: {TaskState.Name(response.task.status.state)}")
        elif kind == "status_update":
            status = response.status_update.status
            said = " ".join(p.text for p in status.message.parts)
            print(f"{TaskState.Name(status.state)}: {said}")
        elif kind == "artifact_update":
            print("answer:", " ".join(p.text for p in response.artifact_update.artifact.parts))


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    url, question = (args[0], args[1]) if len(args) > 1 else ("http://127.0.0.1:8070", args[0])
    asyncio.run(main(url, question))

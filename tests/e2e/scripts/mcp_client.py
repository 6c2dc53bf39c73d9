#!/usr/bin/env python3
"""Drives `baton mcp serve` with the official MCP Python SDK (`mcp`) and
prints what it saw as one JSON object, for the e2e tests.

    mcp_client.py stdio BATON NATS_URL QUESTION [AGENTS]   spawn `baton mcp serve` on stdio
    mcp_client.py http URL QUESTION [TOKEN]                 connect over streamable HTTP
    mcp_client.py budget URL AGENT QUESTION TOKENS          one call with `budget_tokens`
    mcp_client.py turns URL AGENT CONVERSATION TEXT...      one call per TEXT, in one conversation
    mcp_client.py turns_as URL TOKEN AGENT CONVERSATION TEXT...   the same, as the caller of TOKEN
    mcp_client.py content URL AGENT QUESTION                one call; prints its content blocks
    mcp_client.py elicit URL AGENT CONVERSATION ANSWER TEXT...   turns, answering elicitations with
                                                            ANSWER (`-decline`: declining them)
    mcp_client.py logging URL AGENT QUESTION LEVEL          one call after logging/setLevel LEVEL
                                                            (`none`: no setLevel); prints the logs
"""

import asyncio
import json
import sys

import httpx2
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def exercise(session, question):
    await session.initialize()
    listed = await session.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    progress = []

    async def on_progress(value, total, message):
        progress.append(message)

    result = await session.call_tool(
        "general_enquiry", {"question": question}, progress_callback=on_progress
    )
    failed = await session.call_tool("fragile", {"question": "break"})
    missing = await session.call_tool("general_enquiry", {})
    # Feedback on the session the first call ran, named in its _meta.
    ran = (result.meta or {}).get("baton/session")
    liked = await session.call_tool("baton.feedback", {"session": ran, "score": 0.9, "note": "quick"})
    too_much = await session.call_tool("baton.feedback", {"session": ran, "score": 3})
    return {
        "tools": sorted(tools),
        "description": tools["general_enquiry"].description if "general_enquiry" in tools else None,
        "required": (tools["general_enquiry"].input_schema or {}).get("required") if "general_enquiry" in tools else None,
        "is_error": result.is_error,
        "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
        "progress": progress,
        "failed_is_error": failed.is_error,
        "failed_text": [c.text for c in failed.content if getattr(c, "type", "") == "text"],
        "missing_is_error": missing.is_error,
        "missing_text": [c.text for c in missing.content if getattr(c, "type", "") == "text"],
        "session": ran,
        "feedback_is_error": liked.is_error,
        "feedback_text": [c.text for c in liked.content if getattr(c, "type", "") == "text"],
        "bad_feedback_is_error": too_much.is_error,
        "bad_feedback_text": [c.text for c in too_much.content if getattr(c, "type", "") == "text"],
    }


async def turns(session, agent, conversation, texts):
    """One call per text in one conversation: each result's error flag,
    text blocks and structured content."""
    await session.initialize()
    said = []
    for text in texts:
        result = await session.call_tool(agent, {"question": text, "conversation": conversation})
        said.append({
            "is_error": result.is_error,
            "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
            "structured": result.structured_content,
        })
    return said


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        baton, nats_url, question, *rest = sys.argv[2:]
        args = ["--nats-url", nats_url, "mcp", "serve"]
        if rest:
            args += ["--agents", rest[0]]
        params = StdioServerParameters(command=baton, args=args)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                print(json.dumps(await exercise(session, question)))
    elif mode == "http":
        url, question, *rest = sys.argv[2:]
        headers = {"Authorization": f"Bearer {rest[0]}"} if rest else None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    print(json.dumps(await exercise(session, question)))
    elif mode in ("budget", "budget_cost"):
        url, agent, question, amount = sys.argv[2:]
        key = "budget_tokens" if mode == "budget" else "budget_cost"
        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool(
                        agent, {"question": question, key: json.loads(amount)}
                    )
                    print(json.dumps({
                        "is_error": result.is_error,
                        "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
                    }))
    elif mode == "progress":
        url, agent, question = sys.argv[2:]
        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    progress = []

                    async def on_progress(value, total, message):
                        progress.append(message)

                    result = await session.call_tool(
                        agent, {"question": question}, progress_callback=on_progress
                    )
                    print(json.dumps({
                        "is_error": result.is_error,
                        "text": [c.text for c in result.content if getattr(c, "type", "") == "text"],
                        "progress": progress,
                    }))
    elif mode in ("turns", "turns_as"):
        if mode == "turns_as":
            url, token, agent, conversation, *texts = sys.argv[2:]
            headers = {"Authorization": f"Bearer {token}"}
        else:
            url, agent, conversation, *texts = sys.argv[2:]
            headers = None
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    print(json.dumps({"turns": await turns(session, agent, conversation, texts)}))
    elif mode == "content":
        url, agent, question = sys.argv[2:]
        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool(agent, {"question": question})
                    print(json.dumps({
                        "is_error": result.is_error,
                        "structured": result.structured_content,
                        "content": [block.model_dump(mode="json", by_alias=True, exclude_none=True)
                                    for block in result.content],
                    }))
    elif mode == "elicit":
        url, agent, conversation, answer, *texts = sys.argv[2:]
        asked = []

        async def on_elicit(context, params):
            asked.append({"message": params.message, "schema": params.requested_schema})
            if answer == "-decline":
                return types.ElicitResult(action="decline")
            return types.ElicitResult(action="accept", content={"answer": answer})

        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
                    said = await turns(session, agent, conversation, texts)
                    print(json.dumps({"turns": said, "asked": asked}))
    elif mode == "logging":
        url, agent, question, level = sys.argv[2:]
        logs = []

        async def on_log(params):
            logs.append({"level": params.level, "logger": params.logger, "data": params.data})

        async with create_mcp_http_client() as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write, logging_callback=on_log) as session:
                    initialized = await session.initialize()
                    if level != "none":
                        await session.set_logging_level(level)
                    result = await session.call_tool(agent, {"question": question})
                    # Notifications may come on the session's own stream, not
                    # the call's: the log of the session's end, sent before
                    # the result, may arrive just after it.
                    for _ in range(20):
                        if level == "none" or any(
                            log["data"].get("event") in ("completed", "failed") for log in logs
                        ):
                            break
                        await asyncio.sleep(0.1)
                    print(json.dumps({
                        "logging": initialized.capabilities.logging is not None,
                        "is_error": result.is_error,
                        "session": (result.meta or {}).get("baton/session"),
                        "logs": logs,
                    }))
    elif mode == "unauthorized":
        (url,) = sys.argv[2:]
        async with httpx2.AsyncClient() as http:
            response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            print(json.dumps({"status": response.status_code}))
    else:
        sys.exit(f"unknown mode {mode}")


asyncio.run(main())

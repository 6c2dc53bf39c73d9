#!/usr/bin/env python3
"""Asks a Baton agent type a question through MCP, with the official MCP
Python SDK (`pip install mcp`), the way any MCP host does.

    baton dev --serve                      # in one shell: a server and the demo agents
    python3 ask.py NATS_URL "I want a refund for order ABC-123"

It starts `baton mcp serve` on stdio, lists the tools (one per agent type),
calls `general_enquiry`, prints each event of the session as it arrives
(progress notifications), then the answer.
"""

import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(nats_url, question, tool="general_enquiry"):
    server = StdioServerParameters(command="baton", args=["--nats-url", nats_url, "mcp", "serve"])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for listed in (await session.list_tools()).tools:
                print(f"tool {listed.name}: {listed.description}")

            async def progress(value, total, message):
                print(f"  ... {message}")

            result = await session.call_tool(tool, {"question": question}, progress_callback=progress)
            text = " ".join(c.text for c in result.content if c.type == "text")
            print(("error: " if result.is_error else "answer: ") + text)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    asyncio.run(main(*sys.argv[1:]))

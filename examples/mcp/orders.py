#!/usr/bin/env python3
"""An order service as an MCP server, with the official MCP Python SDK
(`pip install mcp`): the tools an LLM refund agent calls.

    python3 orders.py                         # MCP on stdio (a spec's command = [...])
    python3 orders.py --http 8000 --token T   # streamable HTTP on 127.0.0.1:8000/mcp, bearer token T

Tools:
- get_order(order_id): the order, as JSON text; annotated read-only;
- refund_order(order_id, amount): refunds it; annotated destructive and not
  idempotent, as a refund is. A refund is a side effect: it is appended to
  the file $ORDERS_LOG (one JSON line each) with the call's idempotency key,
  and a second call with the same key is answered from that record without
  refunding again: this server honours Baton's idempotency key, which a
  spec declares with `idempotent = true` in its [[mcp]] table.
"""

import argparse
import json
import os
import time

import mcp.types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

ORDERS = {
    "ABC-123": {"order_id": "ABC-123", "item": "kettle", "total": 49.5, "status": "delivered"},
    "XYZ-9": {"order_id": "XYZ-9", "item": "lamp", "total": 20.0, "status": "shipped"},
}

server = MCPServer("orders")
READ_ONLY = types.ToolAnnotations(readOnlyHint=True)


def log_path() -> str | None:
    return os.environ.get("ORDERS_LOG")


def idempotency_key(ctx: Context) -> str | None:
    """The caller's `_meta["baton/idempotency-key"]`, if it sent one."""
    meta = getattr(ctx.request_context, "meta", None)
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get("baton/idempotency-key")
    extra = getattr(meta, "model_extra", None) or {}
    return extra.get("baton/idempotency-key")


@server.tool(annotations=READ_ONLY)
def get_order(order_id: str) -> str:
    """Look up an order by its id: item, total and delivery status."""
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"no order {order_id}")
    return json.dumps(order)


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False))
def refund_order(order_id: str, amount: float, ctx: Context) -> str:
    """Refund an amount of an order to the customer's payment method."""
    if order_id not in ORDERS:
        raise ToolError(f"no order {order_id}")
    # A slow payment provider, for tests: $ORDERS_DELAY_S seconds.
    time.sleep(float(os.environ.get("ORDERS_DELAY_S", "0")))
    key = idempotency_key(ctx)
    path = log_path()
    if path and key and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                done = json.loads(line)
                if done.get("key") == key:
                    return f"refund {done['refund_id']} of {done['amount']} already made"
    refund_id = f"R-{order_id}-{abs(hash((order_id, amount, key))) % 10000:04d}"
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"refund_id": refund_id, "order_id": order_id, "amount": amount, "key": key}) + "\n")
    return f"refund {refund_id} of {amount} made for {order_id}"


if os.environ.get("ORDERS_TEST_TOOLS"):
    # Tools that misbehave, for Baton's tests of bad servers.

    @server.tool(annotations=READ_ONLY)
    def big_report(megabytes: int) -> str:
        """A report of the given size, in MB."""
        return "x" * (megabytes * 1024 * 1024)

    @server.tool(annotations=READ_ONLY)
    def flaky_lookup(order_id: str) -> str:
        """Like get_order, but the server dies at its first call (marker file $ORDERS_MARKER)."""
        marker = os.environ["ORDERS_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)
        return get_order(order_id)

    @server.tool(annotations=READ_ONLY)
    def order_facts(order_id: str) -> types.CallToolResult:
        """The order as structured content only, with no text part."""
        return types.CallToolResult(content=[], structured_content=ORDERS[order_id])

    @server.tool(annotations=READ_ONLY)
    def malformed(order_id: str) -> str:
        """A tool whose input schema is not a JSON Schema."""
        return order_id

    # What a broken server might send: a property's "type" must be a string or a list.
    server._tool_manager.get_tool("malformed").parameters = {"type": "object", "properties": {"order_id": {"type": 12}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port instead of stdio")
    parser.add_argument("--token", help="with --http: the bearer token every request must carry")
    args = parser.parse_args()
    if os.environ.get("ORDERS_STARTS"):
        with open(os.environ["ORDERS_STARTS"], "a", encoding="utf-8") as f:
            f.write("started\n")
    if args.http is None:
        server.run("stdio")
        return
    import uvicorn

    app = server.streamable_http_app()
    token = args.token

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and token:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"a bearer token is required"})
                return
        await app(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A ledger as an MCP server (the official MCP Python SDK, streamable HTTP),
for Baton's tests of tool classes, in-doubt calls and approvals. It counts
its own side effects: every call that takes effect is one JSON line in
$LEDGER_LOG ({tool, args, key, client}: client is the name the caller gave
in its `initialize`).

    python3 ledger.py --http PORT

Tools, one per annotation class:
- balance(account): annotated read-only;
- set_limit(account, limit): annotated idempotent (not read-only);
- transfer(account, amount): no annotations (so: destructive, not idempotent);
- close_account(account): annotated destructive;
- pay(account, amount): no annotations; before it takes effect it asks the
  user to confirm (`elicitation/create`: `confirm`, a boolean, and `note`,
  a string defaulting to "none"), logging each question as tool `pay?`;
- pay_with_receipt(account, amount): asks to confirm, takes effect, then
  asks whether to send a receipt (a question after it acted).

$LEDGER_CONTROL names a file read at every call, `MODE TOOL`: a call of TOOL
in mode `stall-after` takes effect, then waits 30 s before answering (a
worker killed meanwhile leaves a call that happened); in `stall-before` it
waits 30 s first (killing the server then leaves a call that did not
happen). With $LEDGER_KEYED set, a call whose `_meta["baton/idempotency-key"]`
was seen before takes no effect again; it is logged with `"repeat": true`.
$LEDGER_DELAY_S makes every call wait that long before and again after it
takes effect (a slow bank), so a kill may land on either side.
"""

import argparse
import asyncio
import json
import os

import mcp.types as types
from pydantic import BaseModel, Field
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("ledger")


def control(tool: str) -> str:
    """The stall mode $LEDGER_CONTROL sets for `tool`, if any."""
    path = os.environ.get("LEDGER_CONTROL")
    if not path or not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        words = f.read().split()
    return words[0] if len(words) == 2 and words[1] == tool else ""


def key_of(ctx: Context) -> str | None:
    meta = getattr(ctx.request_context, "meta", None)
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get("baton/idempotency-key")
    return (getattr(meta, "model_extra", None) or {}).get("baton/idempotency-key")


def client_of(ctx: Context) -> str | None:
    """The name the calling client gave in its `initialize` (`clientInfo`)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None)


def effects() -> list[dict]:
    path = os.environ["LEDGER_LOG"]
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


async def effect(tool: str, args: dict, ctx: Context) -> str:
    """Takes effect once (per key, with $LEDGER_KEYED), as $LEDGER_CONTROL says."""
    key = key_of(ctx)
    mode = control(tool)
    delay = float(os.environ.get("LEDGER_DELAY_S", "0"))
    await asyncio.sleep(delay)
    if mode == "stall-before":
        await asyncio.sleep(30)
    line = {"tool": tool, "args": args, "key": key, "client": client_of(ctx)}
    repeat = os.environ.get("LEDGER_KEYED") and key and any(e.get("key") == key and e.get("tool") == tool for e in effects())
    if repeat:
        line["repeat"] = True
    with open(os.environ["LEDGER_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    await asyncio.sleep(delay)
    if repeat:
        return f"{tool} already done for key {key}"
    if mode == "stall-after":
        await asyncio.sleep(30)
    return f"{tool} done: {json.dumps(args, sort_keys=True)}"


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=True))
async def balance(account: str, ctx: Context) -> str:
    """The account's balance."""
    return await effect("balance", {"account": account}, ctx)


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, idempotentHint=True, destructiveHint=False))
async def set_limit(account: str, limit: int, ctx: Context) -> str:
    """Sets the account's spending limit."""
    return await effect("set_limit", {"account": account, "limit": limit}, ctx)


@server.tool()
async def transfer(account: str, amount: int, ctx: Context) -> str:
    """Transfers an amount out of the account."""
    return await effect("transfer", {"account": account, "amount": amount}, ctx)


@server.tool(annotations=types.ToolAnnotations(readOnlyHint=False, destructiveHint=True))
async def close_account(account: str, ctx: Context) -> str:
    """Closes the account."""
    return await effect("close_account", {"account": account}, ctx)


class Confirm(BaseModel):
    """What `pay` asks the user."""

    confirm: bool = Field(description="Make the payment?")
    note: str = Field(default="none", description="A note for the payee")


@server.tool()
async def pay(account: str, amount: int, ctx: Context) -> str:
    """Pays an amount from the account, once the user confirms it."""
    with open(os.environ["LEDGER_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": "pay?", "args": {"account": account, "amount": amount}, "key": key_of(ctx)}) + "\n")
    said = await ctx.elicit(f"Pay {amount} from {account}?", Confirm)
    if said.action != "accept":
        return f"payment not made: the user chose {said.action}"
    if not said.data.confirm:
        return "payment not made: the user said no"
    return await effect("pay", {"account": account, "amount": amount, "note": said.data.note}, ctx)


class Receipt(BaseModel):
    """What `pay_with_receipt` asks after it paid."""

    receipt: bool = Field(description="Send a receipt?")


@server.tool()
async def pay_with_receipt(account: str, amount: int, ctx: Context) -> str:
    """Pays once the user confirms, then asks whether to send a receipt."""
    said = await ctx.elicit(f"Pay {amount} from {account}?", Confirm)
    if said.action != "accept" or not said.data.confirm:
        return "payment not made"
    paid = await effect("pay_with_receipt", {"account": account, "amount": amount}, ctx)
    receipt = await ctx.elicit("Send a receipt?", Receipt)
    sent = receipt.action == "accept" and receipt.data.receipt
    return f"{paid}; receipt {'sent' if sent else 'not sent'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--http", type=int, required=True, help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    args = parser.parse_args()
    import uvicorn

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=args.http, log_level="warning")


if __name__ == "__main__":
    main()

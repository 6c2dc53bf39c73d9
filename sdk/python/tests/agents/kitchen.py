"""A test agent: one handler, whose behaviour the variable `case` picks."""

from __future__ import annotations

import asyncio
import datetime
import os
import subprocess
import sys
from typing import Any

import baton

agent = baton.Agent()


def charge(amount: int) -> dict[str, Any]:
    print(f"charging {amount}")  # stray output: must go to stderr
    return {"charged": amount, "key": CTX.key}


CTX: baton.Context


@agent.task
async def handle(task: baton.Task, ctx: baton.Context) -> Any:
    global CTX
    CTX = ctx
    case = task.variables.get("case")
    if case == "str":
        return "hello " + task.text
    if case == "dict":
        return {"k": "v"}
    if case == "complete":
        return baton.complete(
            {"n": 1}, say="done", variables={"a": 1}, state={"b": 2}, hand_back=True
        )
    if case == "answer":
        return baton.answer("for the rules")
    if case == "handoff_to":
        return baton.handoff(to="billing", reason="out_of_scope", suggested_next_action="refund it")
    if case == "handoff_requires":
        return baton.handoff(requires=["refunds"], domains=["eu"], min_tier=2)
    if case == "escalate":
        return baton.escalate(requires=["human"], reason="user_escalation")
    if case == "fallback":
        return baton.fallback("complexity_exceeded")
    if case == "reject":
        return baton.reject("not mine")
    if case == "fail":
        return baton.fail("database down", retryable=True)
    if case == "a2a":
        return baton.a2a_message("hi", baton.a2a_data({"n": 1}))
    if case == "none":
        return None
    if case == "int":
        return 42
    if case == "raise":
        raise ValueError("boom")
    if case == "fatal":
        raise baton.Fatal("card expired")
    if case == "not_json":
        return baton.complete({"when": datetime.date(2024, 1, 1)})
    if case == "step":
        value = await ctx.step("charge", charge, 10)
        return {"value": value, "again": await ctx.step("tuple", lambda: (1, 2))}
    if case == "step_async":

        async def fetch() -> str:
            await asyncio.sleep(0)
            return "fetched " + ctx.key

        return await ctx.step("fetch", fetch, idempotent=True)
    if case == "gather_steps":

        async def slow(delay: float) -> list[str]:
            before = ctx.key
            await asyncio.sleep(delay)
            return [before, ctx.key]

        def blocking(delay: float) -> list[str]:
            before = ctx.key
            import time

            time.sleep(delay)
            return [before, ctx.key]

        results = await asyncio.gather(
            ctx.step("a", slow, 0.2), ctx.step("b", slow, 0.05), ctx.step("c", blocking, 0.1)
        )
        try:
            ctx.key
        except RuntimeError as error:
            outside = str(error)
        return {"results": list(results), "outside": outside}
    if case == "step_not_json":
        return await ctx.step("charge", lambda: datetime.datetime(2024, 1, 1))
    if case == "step_raises":

        def declined() -> None:
            raise RuntimeError("card declined")

        return await ctx.step("charge", declined)
    if case == "print":
        print("stray print")
        sys.stdout.write("stray write\n")
        os.write(1, b"stray fd write\n")
        subprocess.run(["echo", "from a child process"], check=True)
        return "clean"
    if case == "big":
        return {"length": len(task.text), "tail": task.text[-5:]}
    if case == "sleep":
        await asyncio.sleep(0.2)
        return task.id
    if case == "tools_model":
        tools = await ctx.tools()
        reply = await ctx.model(task.messages, tools=tools, temperature=0)
        return {
            "tools": tools,
            "text": reply.text,
            "calls": [[c.id, c.name, c.arguments, c.raw_arguments] for c in reply.tool_calls],
            "finish": reply.finish_reason,
            "usage": reply.usage,
            "message": reply.message,
        }
    if case == "parallel_calls":
        first, second = await asyncio.gather(ctx.tool("a", {"n": 1}), ctx.tool("b"))
        return {"texts": [first.text, first.is_error, second.text, second.is_error]}
    if case == "call_error":
        try:
            await ctx.tool("nope", {})
        except baton.CallError as error:
            return {"kind": error.kind, "message": error.message}
        return "no error"
    if case == "call_error_uncaught":
        await ctx.model([{"role": "user", "content": "hi"}])
        return "unreachable"
    if case == "ask":
        return "answer: " + await ctx.ask("Which order?")
    if case == "ask_ignores_cancel":
        try:
            await ctx.ask("Which order?")
        except asyncio.CancelledError:
            pass
        try:
            await ctx.say("after the end")
        except asyncio.CancelledError:
            pass
        return "sneaky answer"
    if case == "delegate":
        answers = await ctx.delegate(
            [baton.Child(to="researcher", input="find it"), {"requires": ["maths"], "input": "add"}],
            mode="serial",
        )
        return {"results": answers}
    if case == "say":
        await ctx.say("working on it")
        return "said"
    if case == "no_calls":
        try:
            await ctx.say("x")
        except baton.CallError as error:
            return {"kind": error.kind, "message": error.message}
        return "no error"
    if case == "fields":
        return {
            "id": task.id,
            "text": task.text,
            "messages": task.messages,
            "variables": task.variables,
            "state": task.state,
            "session": task.session,
            "conversation": task.conversation,
            "attempt": task.attempt,
            "resume": task.resume,
            "version": task.version,
        }
    return f"unknown case {case!r}"


if __name__ == "__main__":
    agent.run()

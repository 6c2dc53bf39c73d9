"""The Python agents of the code-agent tests, one per MODE, written with
the `baton` package (sdk/python). Every side effect appends a line to the
file COUNTS, so a test counts what ran, and what ran twice."""

import asyncio
import os
import time

import baton

agent = baton.Agent()
MODE = os.environ.get("MODE", "steps")
COUNTS = os.environ.get("COUNTS", os.devnull)
if os.environ.get("PIDFILE"):
    with open(os.environ["PIDFILE"], "w", encoding="utf-8") as f:
        f.write(str(os.getpid()))


def effect(name: str) -> None:
    with open(COUNTS, "a", encoding="utf-8") as f:
        f.write(name + "\n")


def pause_here(name: str) -> None:
    """Waits while the file PAUSE exists, after saying it got here."""
    pause = os.environ.get("PAUSE")
    if pause and os.path.exists(pause):
        effect(f"{name}:reached")
        while os.path.exists(pause):
            time.sleep(0.05)


def prepare(text: str) -> dict:
    effect("prepare")
    return {"text": text}


def charge(amount: int) -> dict:
    effect("charge")
    pause_here("charge")
    return {"receipt": "r-1", "amount": amount}


async def steps(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    prepared = await ctx.step("prepare", prepare, task.text)
    idempotent = os.environ.get("IDEMPOTENT") == "1"
    receipt = await ctx.step("charge", charge, 10, idempotent=idempotent)
    return baton.complete({"prepared": prepared, "receipt": receipt})


async def drift(task: baton.Task, ctx: baton.Context) -> str:
    runs = os.environ["RUNS"]
    with open(runs, "a", encoding="utf-8") as f:
        f.write("run\n")
    with open(runs, encoding="utf-8") as f:
        n = len(f.read().splitlines()) - 1
    await ctx.step(f"step-{n}", effect, f"step-{n}")
    if n == 0:
        raise RuntimeError("a transient failure after the first step")
    return "done"


async def asks(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    await ctx.step("one", effect, "one")
    first = await ctx.ask("Which order?")
    await ctx.step("two", effect, "two")
    second = await ctx.ask("And the amount?")
    await ctx.step("three", effect, "three")
    return baton.complete({"order": first, "amount": second})


async def tools(task: baton.Task, ctx: baton.Context) -> str:
    offered = await ctx.tools()
    messages = [{"role": "system", "content": "You handle refunds."}, *task.messages]
    for _ in range(8):
        reply = await ctx.model(messages, tools=offered)
        messages.append(reply.message)
        if not reply.tool_calls:
            return reply.text
        for call in reply.tool_calls:
            result = await ctx.tool(call.name, call.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.text})
    return baton.fail("too many turns")


async def delegate(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    await ctx.step("before", effect, "before")
    if os.environ.get("ASK_MODEL"):
        await ctx.model(task.messages)
    results = await ctx.delegate(
        [baton.Child(to="helper", input="part a"), baton.Child(to="helper", input="part b")]
    )
    shipped = await ctx.ask("Ship both parts?")
    await ctx.step("after", effect, "after")
    parts = sorted(str(r["output"]) for r in results)
    return baton.complete({"parts": parts, "shipped": shipped})


async def model(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    prepared = await ctx.step("prepare", prepare, task.text)
    reply = await ctx.model(task.messages)
    return baton.complete({"answer": reply.text, "prepared": prepared})


async def echo(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    print("a stray print from the handler")
    await asyncio.sleep(float(os.environ.get("ECHO_DELAY_S", "0")))
    return baton.complete({"length": len(task.text), "session": task.session, "pid": os.getpid()})


async def chat(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    turn = sum(1 for m in task.messages if m["role"] == "user")
    said = [m["content"] for m in task.messages if m["role"] == "assistant"]
    return baton.complete(
        f"turn {turn}: {task.text}; before: {said}; conversation: {task.conversation is not None}"
    )


async def spend(task: baton.Task, ctx: baton.Context) -> str:
    first = await ctx.model(task.messages)
    second = await ctx.model([*task.messages, first.message, {"role": "user", "content": "more"}])
    return second.text


async def a2a(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    if "reject" in task.text:
        return baton.complete(baton.a2a_reject("not an order question"))
    return baton.complete(baton.a2a_artifacts("part one", "part two"))


def prepared_by(agent: str, text: str) -> dict:
    effect(f"{agent}:prepare")
    return {"text": text, "by": agent}


def flavoured(agent: str, flavour: str) -> str:
    effect(f"{agent}:{flavour}")
    return flavour


async def history(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    """A step, a model call, the refund tool (REFUND), a step of this
    version's own (FLAVOUR), then a handoff to NEXT or the answer."""
    agent = task.agent or "coder"
    prepared = await ctx.step("prepare", prepared_by, agent, task.text)
    reply = await ctx.model(task.messages)
    out = {"agent": agent, "answer": reply.text, "prepared": prepared, "version": task.version}
    twice = bool(os.environ.get("TWICE"))  # the same model call and refund again
    if twice:
        out["again"] = (await ctx.model(task.messages)).text
    if os.environ.get("REFUND"):
        refund = await ctx.tool("refund_order", {"order_id": "ABC-123", "amount": 49.5})
        out["refund"] = refund.text
        if twice:
            again = await ctx.tool("refund_order", {"order_id": "ABC-123", "amount": 49.5})
            out["refund_again"] = again.text
    flavour = os.environ.get("FLAVOUR")
    if flavour:
        out["flavour"] = await ctx.step(f"flavour-{flavour}", flavoured, agent, flavour)
    if os.environ.get("NEXT"):
        variables = {f"{agent}_prepared": prepared, f"{agent}_answer": reply.text}
        return baton.handoff(to=os.environ["NEXT"], reason="knowledge_gap", variables=variables)
    out["before"] = {k: v for k, v in task.variables.items() if k.startswith("coder_")}
    said = f"{agent}@{task.version} ({flavour or 'plain'}): {reply.text}"
    return baton.complete(out, say=said)


async def pinned(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    """A step, a question, a step: each step's effect names the FLAVOUR of
    the program that ran it."""
    flavour = os.environ.get("FLAVOUR", "plain")
    await ctx.step("before", effect, f"{flavour}:before")
    order = await ctx.ask("Which order?")
    await ctx.step("after", effect, f"{flavour}:after")
    return baton.complete({"order": order, "flavour": flavour, "version": task.version})


async def entry(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    """A conversation's entry: hands its first turn to HOLDER, answers later ones."""
    turn = sum(1 for m in task.messages if m["role"] == "user")
    await ctx.step("turn", effect, f"entry:{turn}")
    if turn == 1:
        return baton.handoff(to=os.environ["HOLDER"], reason="knowledge_gap")
    return baton.complete(f"entry answers turn {turn}: {task.text}")


async def holder(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    """Holds the conversation until told it is done, then hands it back."""
    turn = sum(1 for m in task.messages if m["role"] == "user")
    await ctx.step("turn", effect, f"holder:{turn}")
    if "done" in task.text:
        return baton.complete(f"holder hands back at turn {turn}", hand_back=True)
    return baton.complete(f"holder answers turn {turn}: {task.text}")


HANDLERS = {
    "steps": steps,
    "drift": drift,
    "asks": asks,
    "tools": tools,
    "delegate": delegate,
    "echo": echo,
    "model": model,
    "chat": chat,
    "spend": spend,
    "a2a": a2a,
    "history": history,
    "pinned": pinned,
    "entry": entry,
    "holder": holder,
}
agent.task(HANDLERS[MODE])
agent.run()

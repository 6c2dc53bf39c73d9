"""The shared protocol vectors (proto-schemas/vectors/exec_call_*.json and
exec_call_result_*.json, written by the Rust side): the package writes each
call vector's exact shape and reads each result vector as meant."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import VECTORS

import baton
from baton._server import Server


def _load(pattern: str, exclude: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(VECTORS.glob(pattern)):
        if exclude and path.name.startswith(exclude):
            continue
        data = json.loads(path.read_text())
        items = data if isinstance(data, list) else [data]
        for n, item in enumerate(items):
            assert isinstance(item, dict), f"{path.name}: not a JSON object"
            found.append((f"{path.name}[{n}]" if isinstance(data, list) else path.name, item))
    return found


CALLS = _load("exec_call_*.json", exclude="exec_call_result_")
RESULTS = _load("exec_call_result_*.json")
NO_VECTORS = "no proto-schemas/vectors/{} yet: the Rust side has not written them"


Handler = Callable[[baton.Task, baton.Context], Awaitable[Any]]


async def _drive(
    handler: Handler,
    request_id: str,
    answer: Callable[[dict[str, Any]], dict[str, Any] | None],
    no_wait: bool = False,
    servers: list[Server] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Runs `handler` on one request (from a worker that takes calls not
    waited for, when `no_wait`); `answer(call)` gives each call's result line."""
    calls: list[dict[str, Any]] = []
    replies: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    server: Server

    def write(line: str) -> None:
        message = json.loads(line)
        if "call" in message:
            calls.append(message)
            result = answer(message)
            if message.get("wait") is False and result is not None and "result" in result:
                result = None  # the worker answers a call not waited for only with an error or an end
            if result is not None:
                loop.call_soon(server.dispatch, {"call": message["call"], **result})
        else:
            assert message["id"] == request_id
            replies.append(message["reply"])

    server = Server(handler, write, logging.getLogger("baton.vectors"))
    if servers is not None:
        servers.append(server)
    envelope = {"v": 1, "id": "e", "session": "s", "kind": "task", "context": {"initial_query": "hi"}}
    request = {"id": request_id, "envelope": envelope, "attempt": 1, "calls": True}
    if no_wait:
        request["no_wait"] = True
    server.dispatch(request)
    await asyncio.wait_for(server.drain(), 10)
    assert len(replies) <= 1
    return calls, replies[0] if replies else None


def _handler_for(vector: dict[str, Any]) -> Handler:
    """A handler making the call the vector shows, with its fields."""
    op = vector["op"]

    async def handle(task: baton.Task, ctx: baton.Context) -> Any:
        if op == "tools":
            await ctx.tools()
        elif op == "model":
            await ctx.model(vector["messages"], tools=vector.get("tools"), **vector.get("params", {}))
        elif op == "tool":
            await ctx.tool(vector["name"], vector.get("arguments", {}))
        elif op == "step":
            await ctx.step(vector["name"], lambda: None, idempotent=vector.get("idempotent", False))
        elif op == "step_done":
            def fn() -> Any:
                if "error" in vector:
                    raise RuntimeError(vector["error"])
                return vector.get("value")

            try:
                await ctx.step(vector["name"], fn)
            except RuntimeError:
                pass
        elif op == "ask":
            await ctx.ask(vector["question"])
        elif op == "delegate":
            await ctx.delegate(vector["children"], mode=vector.get("mode", "parallel"))
        elif op == "say":
            await ctx.say(vector["text"])
        else:
            pytest.fail(f"a call vector with an op the package does not know: {op!r}")
        return "done"

    return handle


def _answer_for(op: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def answer(call: dict[str, Any]) -> dict[str, Any]:
        results: dict[str, Any] = {
            "tools": {"tools": []},
            "model": {"message": {"role": "assistant", "content": "ok"}, "usage": {}, "finish_reason": "stop"},
            "tool": {"text": "ok", "is_error": False},
            "step": {"run": True, "key": "10000000-0000-4000-8000-000000000001/1001/0"},
            "step_done": {},
            "ask": {"answer": "ok"},
            "delegate": {"results": []},
            "say": {},
        }
        return {"result": results[call["op"]]}

    return answer


# What the protocol leaves out is its default: the package may write it.
DEFAULTS = {"idempotent": False, "mode": "parallel", "arguments": {}}


def _normalised(call: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in call.items() if k not in DEFAULTS or v != DEFAULTS[k]}
    if out.get("op") == "step_done" and "error" not in out and out.get("value") is None:
        out.pop("value", None)  # serde reads `"value": null` as no value, which is null
    return out


@pytest.mark.skipif(not CALLS, reason=NO_VECTORS.format("exec_call_*.json"))
@pytest.mark.parametrize("name,vector", CALLS, ids=[n for n, _ in CALLS])
def test_the_package_writes_each_call_vector(name: str, vector: dict[str, Any]) -> None:
    assert isinstance(vector.get("call"), str) and isinstance(vector.get("task"), str), name
    no_wait = vector.get("wait") is False
    calls, reply = asyncio.run(_drive(_handler_for(vector), vector["task"], _answer_for(vector["op"]), no_wait))
    assert reply == {"action": "terminate", "output": "done", "say": "done"}
    made = [c for c in calls if c["op"] == vector["op"]]
    assert made, f"{name}: the package made no {vector['op']!r} call"
    produced = dict(made[0])
    assert isinstance(produced["call"], str) and produced["call"]
    produced["call"] = vector["call"]
    assert _normalised(produced) == _normalised(vector), name


def _reader_for(vector: dict[str, Any]) -> tuple[str, Handler, Callable[[Any], None]]:
    """Which op reads the vector's result, a handler making it, and a check of what it returned."""
    result = vector.get("result")
    seen: dict[str, Any] = {}

    async def call(ctx: baton.Context, op: str) -> Any:
        if op == "tools":
            return await ctx.tools()
        if op == "model":
            return await ctx.model([{"role": "user", "content": "hi"}])
        if op == "tool":
            return await ctx.tool("t", {})
        if op == "step":
            return await ctx.step("s", lambda: seen.setdefault("key", ctx.key))
        if op == "ask":
            return await ctx.ask("q")
        if op == "delegate":
            return await ctx.delegate([baton.Child(to="a", input="x")])
        return await ctx.say("x")

    check: Callable[[Any], None]
    if not isinstance(result, dict):
        op = "say"

        def check(got: Any) -> None:
            assert got is None
    elif "tools" in result:
        op = "tools"

        def check(got: Any) -> None:
            assert got == result["tools"]
    elif "message" in result:
        op = "model"

        def check(got: Any) -> None:
            reply = baton.Reply.from_result(result)
            assert got == reply
            for call in got.tool_calls:
                assert isinstance(call.arguments, dict)
    elif "is_error" in result or "text" in result:
        op = "tool"

        def check(got: Any) -> None:
            assert got == baton.ToolResult(result.get("text", ""), result.get("is_error") is True)
    elif "recorded" in result or "run" in result:
        op = "step"

        def check(got: Any) -> None:
            if result.get("recorded"):
                assert got == result.get("value") and "key" not in seen
            else:
                assert seen["key"] == result["key"]
    elif "answer" in result:
        op = "ask"

        def check(got: Any) -> None:
            assert got == result["answer"]
    elif "results" in result:
        op = "delegate"

        def check(got: Any) -> None:
            assert got == result["results"]
    else:
        op = "say"

        def check(got: Any) -> None:
            assert got is None

    async def handle(task: baton.Task, ctx: baton.Context) -> Any:
        try:
            got = await call(ctx, op)
        except baton.CallError as error:
            return {"kind": error.kind, "message": error.message}
        check(got)
        return "read"

    return op, handle, check


@pytest.mark.skipif(not RESULTS, reason=NO_VECTORS.format("exec_call_result_*.json"))
@pytest.mark.parametrize("name,vector", RESULTS, ids=[n for n, _ in RESULTS])
def test_the_package_reads_each_call_result_vector(name: str, vector: dict[str, Any]) -> None:
    assert isinstance(vector.get("call"), str), name
    kinds = [k for k in ("result", "error", "end") if vector.get(k) is not None]
    assert len(kinds) == 1, f"{name}: a result holds exactly one of result, error, end"
    op, handler, _check = _reader_for(vector)
    first = True

    def answer(call: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal first
        if first and call["op"] == op:
            first = False
            return {k: v for k, v in vector.items() if k != "call"}
        return {"result": {}}

    calls, reply = asyncio.run(_drive(handler, "t1", answer))
    if kinds == ["end"]:
        assert reply is None, f"{name}: an `end` must cancel the handler, with no answer"
    elif kinds == ["error"]:
        assert reply == {
            "action": "terminate",
            "output": {"kind": vector["error"]["kind"], "message": vector["error"]["message"]},
        }
    else:
        assert reply == {"action": "terminate", "output": "read", "say": "read"}, name


def test_vectors_directory_exists() -> None:
    assert Path(VECTORS).is_dir()


def _two_steps(after: list[str]) -> Handler:
    async def handle(task: baton.Task, ctx: baton.Context) -> Any:
        await ctx.step("first", lambda: 1)
        after.append("first")
        await ctx.step("second", lambda: 2)
        after.append("second")
        return "done"

    return handle


def _steps_answered(done: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    def answer(call: dict[str, Any]) -> dict[str, Any] | None:
        if call["op"] == "step":
            return {"result": {"run": True, "key": f"k-{call['name']}"}}
        return done(call)

    return answer


def test_a_step_value_is_not_waited_for_only_where_the_worker_takes_it() -> None:
    after: list[str] = []
    calls, reply = asyncio.run(_drive(_two_steps(after), "t1", _steps_answered(lambda _: {"result": {}})))
    done = [c for c in calls if c["op"] == "step_done"]
    assert [("wait" in c) for c in done] == [False, False], "an older worker gets every call waited for"
    assert reply is not None and after == ["first", "second"]

    # A worker that says no_wait: the values go out with wait false, and
    # the handler goes on without a result line.
    after.clear()
    servers: list[Server] = []
    calls, reply = asyncio.run(_drive(_two_steps(after), "t2", _steps_answered(lambda _: None), True, servers))
    assert servers[0]._calls == {}, "a call not waited for is not kept"
    done = [c for c in calls if c["op"] == "step_done"]
    assert [c.get("wait") for c in done] == [False, False]
    assert [c["value"] for c in done] == [1, 2]
    assert reply == {"action": "terminate", "output": "done", "say": "done"}
    assert after == ["first", "second"]


def test_an_end_for_a_step_value_not_waited_for_stops_the_handler(caplog: pytest.LogCaptureFixture) -> None:
    after: list[str] = []
    ended = _steps_answered(lambda c: {"end": "failed", "message": "the journal is gone"} if c["name"] == "first" else None)
    calls, reply = asyncio.run(_drive(_two_steps(after), "t3", ended, no_wait=True))
    assert reply is None, "an end cancels the handler, which sends no answer"
    assert "second" not in after

    # An error is logged; the handler went on already.
    after.clear()
    failed = _steps_answered(lambda c: {"error": {"kind": "refused", "message": "not running"}} if c["name"] == "first" else None)
    with caplog.at_level(logging.WARNING, logger="baton.vectors"):
        calls, reply = asyncio.run(_drive(_two_steps(after), "t4", failed, no_wait=True))
    assert reply == {"action": "terminate", "output": "done", "say": "done"}
    assert any("not waited for" in r.getMessage() and "not running" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("no_wait", [True, False])
def test_a_step_value_is_spliced_into_its_line_as_json_gives_it(no_wait: bool) -> None:
    value = {"name": "Zoë", "items": (1, None, {"a": "ü"}), "n": 2.5}
    got: list[Any] = []

    async def handle(task: baton.Task, ctx: baton.Context) -> Any:
        got.append(await ctx.step("s", lambda: value))
        got.append(await ctx.step("t", lambda: None))
        return "done"

    answered = _steps_answered(lambda _: None if no_wait else {"result": {}})
    calls, reply = asyncio.run(_drive(handle, "t5", answered, no_wait))
    done = [c for c in calls if c["op"] == "step_done"]
    expected = {"name": "Zoë", "items": [1, None, {"a": "ü"}], "n": 2.5}
    assert [c["value"] for c in done] == [expected, None]
    assert got == [expected, None], "the handler gets the value as JSON gives it"
    assert reply == {"action": "terminate", "output": "done", "say": "done"}


def test_a_context_with_a_caller_of_its_own_gets_plain_values() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    async def caller(op: str, fields: dict[str, Any]) -> Any:
        sent.append((op, fields))
        return {"run": True, "key": "k"} if op == "step" else {}

    task = baton.Task({"id": "1", "envelope": {"id": "e", "session": "s", "context": {}}, "attempt": 1})
    ctx = baton.Context(task, caller, logging.LoggerAdapter(logging.getLogger("baton.vectors"), {}))
    assert asyncio.run(ctx.step("s", lambda: {"a": [1]})) == {"a": [1]}
    assert sent[-1] == ("step_done", {"name": "s", "key": "k", "value": {"a": [1]}})

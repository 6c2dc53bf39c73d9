"""The package's pieces, in process: outcomes, A2A answers, tasks, replies, and baton.testing."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from conftest import VECTORS

import baton
from baton import testing


def test_outcome_replies() -> None:
    assert baton.complete("x").reply == {"action": "terminate", "output": "x", "say": "x"}
    assert baton.answer({"a": 1}, say="s").reply == {"output": {"a": 1}, "say": "s"}
    assert baton.handoff(to="b").reply == {"action": "handoff", "to": "b"}
    assert baton.escalate().reply == {"action": "escalate"}
    assert baton.reject("no").reply == {"action": "reject", "error": "no"}
    assert baton.fail("x").reply == {"action": "fail", "error": "x", "retryable": False}
    assert baton.fail("x", retryable=True, variables={"n": 2}, state={"s": 1}).reply == {
        "action": "fail",
        "error": "x",
        "retryable": True,
        "variables": {"n": 2},
        "state": {"s": 1},
    }
    assert baton.complete(
        1,
        messages=[{"role": "agent", "content": "m"}],
        trace=[{"action": "looked"}],
        problem="p",
    ).reply == {
        "action": "terminate",
        "output": 1,
        "messages": [{"role": "agent", "content": "m"}],
        "trace": [{"action": "looked"}],
        "problem": "p",
    }
    assert baton.complete("x") == baton.complete("x")
    assert baton.complete("x").action == "terminate" and baton.answer("x").action is None


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"to": "a", "requires": ["b"]}, {"to": "a", "domains": ["eu"]}, {"requires": []}],
)
def test_handoff_needs_exactly_one_target(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        baton.handoff(**kwargs)


def test_a_string_is_not_a_list_of_capabilities() -> None:
    with pytest.raises(TypeError):
        baton.handoff(requires="refunds")
    with pytest.raises(TypeError):
        baton.Child(requires="refunds", input="x")


def test_a2a_answers() -> None:
    assert baton.a2a_reject("not mine") == {"a2a": {"reject": "not mine"}}
    assert baton.a2a_message("hi", {"data": {"n": 1}}) == {
        "a2a": {"message": [{"text": "hi"}, {"data": {"n": 1}}]}
    }
    assert baton.a2a_artifacts(
        baton.a2a_artifact("report", "part one ", append=True),
        baton.a2a_artifact("report", "part two", append=True, last_chunk=True),
        baton.a2a_artifact("file", baton.a2a_file(b"tcr", filename="out.txt", media_type="text/plain")),
        baton.a2a_artifact("data", baton.a2a_data({"count": 42})),
        "plain",
    ) == {
        "a2a": {
            "artifacts": [
                {"artifactId": "report", "parts": [{"text": "part one "}], "append": True},
                {"artifactId": "report", "parts": [{"text": "part two"}], "append": True, "lastChunk": True},
                {
                    "artifactId": "file",
                    "parts": [{"raw": "dGNy", "filename": "out.txt", "mediaType": "text/plain"}],
                },
                {"artifactId": "data", "parts": [{"data": {"count": 42}}]},
                {"artifactId": "artifact-5", "parts": [{"text": "plain"}]},
            ]
        }
    }
    assert baton.a2a_file(url="https://x/y") == {"url": "https://x/y"}
    with pytest.raises(ValueError):
        baton.a2a_file()


def test_context_messages_map_to_openai_messages() -> None:
    handoff = json.loads((VECTORS / "handoff_envelope.json").read_text())
    task = baton.Task({"id": "1", "envelope": handoff, "attempt": 1})
    assert task.messages == [
        {"role": "user", "content": "Where is my special order SPC-777?"},
        {"role": "assistant", "content": "Let me check.", "name": "order_management"},
        {"role": "tool", "content": "error: not found", "tool_call_id": "call_1"},
    ]
    assert task.text == "Where is my special order SPC-777?"
    assert task.variables == {"n_attempts": 1, "order_id": "ABC-123"}
    assert task.state == {"tool_error": "timeout"}
    assert task.session == "10000000-0000-4000-8000-000000000002"
    assert task.conversation is None and task.version is None and task.resume is False
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert baton.openai_messages(
        [
            {"role": "system", "content": "rules", "name": "sys"},
            {"role": "agent", "content": "", "tool_calls": calls},
            {"role": "tool", "content": "r", "name": "f", "tool_call_id": "c"},
            "junk",
        ]
    ) == [
        {"role": "system", "content": "rules", "name": "sys"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "content": "r", "tool_call_id": "c"},
    ]


def test_task_is_defensive() -> None:
    task = baton.Task({"id": "1", "envelope": None, "attempt": "x"})
    assert (task.messages, task.text, task.variables, task.session, task.attempt) == ([], "", {}, "", 1)
    conversations = [({"id": "c1", "turn": 2}, "c1"), ({"conversation": "c2"}, "c2"), ({"turn": 1}, None), (7, None)]
    for conversation, expected in conversations:
        task = baton.Task({"id": "1", "envelope": {"conversation": conversation}, "attempt": 1})
        assert task.conversation == expected


def test_version_is_the_pinned_one_for_this_agent_type(monkeypatch: pytest.MonkeyPatch) -> None:
    envelope = {"versions": {"lookup": "v3"}}
    monkeypatch.setenv("BATON_AGENT", "lookup")
    assert baton.Task({"id": "1", "envelope": envelope, "attempt": 1}).version == "v3"
    monkeypatch.setenv("BATON_AGENT", "other")
    assert baton.Task({"id": "1", "envelope": envelope, "attempt": 1}).version is None


def test_reply_parsing() -> None:
    reply = baton.Reply.from_result(
        {
            "message": {
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "tool_calls": [
                    {"id": "1", "function": {"name": "f", "arguments": {"already": "parsed"}}},
                    {"id": "2", "function": {"name": "g", "arguments": "[1, 2]"}},
                    {"id": "3", "function": {"name": "h", "arguments": ""}},
                ],
            }
        }
    )
    assert reply.text == "ab"
    assert reply.message["role"] == "assistant"
    assert [(c.name, c.arguments, c.raw_arguments) for c in reply.tool_calls] == [
        ("f", {"already": "parsed"}, '{"already": "parsed"}'),
        ("g", {}, "[1, 2]"),
        ("h", {}, ""),
    ]
    assert reply.tool_calls[0].tool_message("r") == {"role": "tool", "tool_call_id": "1", "content": "r"}
    assert (reply.usage, reply.finish_reason) == ({}, None)


def test_child() -> None:
    assert baton.Child(to="a", input="x").to_dict() == {"to": "a", "input": "x"}
    assert baton.Child(requires=["b"], input="y", assignment="async").to_dict() == {
        "requires": ["b"],
        "input": "y",
        "assignment": "async",
    }
    with pytest.raises(ValueError):
        baton.Child(input="x")


def test_task_decorator_needs_async_def() -> None:
    agent = baton.Agent()
    with pytest.raises(TypeError):
        agent.task(lambda task, ctx: "x")  # type: ignore[arg-type,return-value]


# baton.testing


agent = baton.Agent()


@agent.task
async def support(task: baton.Task, ctx: baton.Context) -> Any:
    tools = await ctx.tools()
    messages = list(task.messages)
    reply = await ctx.model(messages, tools=tools)
    while reply.tool_calls:
        messages.append(reply.message)
        for call in reply.tool_calls:
            result = await ctx.tool(call.name, call.arguments)
            messages.append(call.tool_message(result.text))
        reply = await ctx.model(messages, tools=tools)
    receipt = await ctx.step("receipt", lambda: {"key": ctx.key})
    await ctx.say("looked it up")
    return baton.complete(reply.text, variables={"receipt": receipt})


def test_fake_worker_runs_a_tool_loop() -> None:
    def lookup(order: str) -> str:
        """Looks up an order."""
        return f"{order} shipped"

    worker = testing.FakeWorker(
        model=[testing.model_reply(tool_calls=[("lookup", {"order": "ABC-1"})]), "ABC-1 has shipped."],
        tools={"lookup": lookup},
    )
    reply = worker.run(agent, "where is ABC-1?")
    assert reply == {
        "action": "terminate",
        "output": "ABC-1 has shipped.",
        "say": "ABC-1 has shipped.",
        "variables": {"receipt": {"key": f"{testing.SESSION_ID}:step:receipt:1"}},
    }
    assert [c["op"] for c in worker.calls] == ["tools", "model", "tool", "model", "step", "step_done", "say"]
    assert worker.calls[0] == {"call": "c1", "task": "1", "op": "tools"}
    assert worker.calls[3]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "ABC-1 shipped"}
    assert worker.said == ["looked it up"]
    assert worker.step_values == {"receipt": {"key": f"{testing.SESSION_ID}:step:receipt:1"}}


def test_fake_worker_recorded_steps_and_errors() -> None:
    ran: list[str] = []

    async def handler(task: baton.Task, ctx: baton.Context) -> Any:
        def charge() -> str:
            ran.append("charge")
            return "new"

        value = await ctx.step("charge", charge)
        try:
            await ctx.model(task.messages)
        except baton.CallError as error:
            return {"value": value, "error": [error.kind, error.message]}
        return "no error"

    assert testing.run(handler, steps={"charge": "recorded"}) == {
        "action": "terminate",
        "output": {"value": "recorded", "error": ["refused", "the fake worker has no scripted model reply left"]},
    }
    assert ran == []


def test_fake_worker_ask_and_delegate() -> None:
    async def handler(task: baton.Task, ctx: baton.Context) -> Any:
        answer = await ctx.ask("Which order?")
        results = await ctx.delegate([baton.Child(to="a", input=answer)])
        return {"answer": answer, "results": results}

    worker = testing.FakeWorker()
    assert worker.run(handler) is None
    assert (worker.ended, worker.asked) == ("waiting", ["Which order?"])
    results = [{"index": 0, "agent": "a", "tag": None, "status": "completed", "output": "ok", "detail": None}]
    assert testing.run(handler, answers=["A-1"], children=[results]) == {
        "action": "terminate",
        "output": {"answer": "A-1", "results": results},
    }


def test_ask_sends_the_schema_of_the_answer_asked_for() -> None:
    schema = {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}

    async def handler(task: baton.Task, ctx: baton.Context) -> Any:
        return await ctx.ask("Your email?", schema=schema)

    worker = testing.FakeWorker()
    assert worker.run(handler) is None
    asked = [(call["question"], call.get("schema")) for call in worker.calls if call["op"] == "ask"]
    assert asked == [("Your email?", schema)]
    # Without a schema, none is sent.
    plain = testing.FakeWorker()

    async def plainly(task: baton.Task, ctx: baton.Context) -> Any:
        return await ctx.ask("Which order?")

    assert plain.run(plainly) is None
    assert all("schema" not in call for call in plain.calls if call["op"] == "ask")


def test_fake_worker_checks_step_values_and_calls_flag() -> None:
    async def handler(task: baton.Task, ctx: baton.Context) -> Any:
        return await ctx.step("when", lambda: datetime.date(2024, 1, 1))

    assert testing.run(handler) == {
        "action": "fail",
        "error": "StepError: step 'when' returned a date, which is not JSON",
        "retryable": False,
    }

    async def nested(task: baton.Task, ctx: baton.Context) -> Any:
        return await ctx.step("when", lambda: {"at": [float("nan")]})

    assert testing.run(nested)["error"] == (  # type: ignore[index]
        "StepError: step 'when' returned a float that is NaN or infinite, which is not JSON"
    )

    async def holder(task: baton.Task, ctx: baton.Context) -> Any:
        return await ctx.step("when", lambda: {"at": {1, 2}})

    assert testing.run(holder)["error"] == (  # type: ignore[index]
        "StepError: step 'when' returned a dict holding a set, which is not JSON"
    )

    async def plain(task: baton.Task, ctx: baton.Context) -> Any:
        try:
            await ctx.say("x")
        except baton.CallError as error:
            return error.kind
        return "called"

    assert testing.FakeWorker(calls=False).run(plain) == {"action": "terminate", "output": "unsupported", "say": "unsupported"}


def _threads_run(limit: int, parties: int) -> list[Any]:
    """Runs `parties` plain functions through `Threads(limit)`; each waits
    for the others (a barrier), so they finish only if all run at once."""
    import asyncio
    import threading

    from baton._threads import Threads

    barrier = threading.Barrier(min(parties, limit), timeout=10)

    def meet(n: int) -> int:
        barrier.wait()
        return n

    def boom() -> None:
        raise KeyError("lost")

    async def main() -> list[Any]:
        threads = Threads(asyncio.get_running_loop(), limit)
        results: list[Any] = await asyncio.gather(
            *(threads.run(meet, n) for n in range(parties)), threads.run(boom), return_exceptions=True
        )
        threads.close()
        return results

    return asyncio.run(main())


def test_plain_functions_each_get_a_thread_up_to_the_limit() -> None:
    *met, raised = _threads_run(limit=8, parties=8)
    assert met == list(range(8))
    assert isinstance(raised, KeyError) and raised.args == ("lost",)


def test_jobs_beyond_the_thread_limit_wait_their_turn() -> None:
    # 6 jobs on 3 threads: they meet three by three, and every one finishes.
    *met, raised = _threads_run(limit=3, parties=6)
    assert met == list(range(6))
    assert isinstance(raised, KeyError)

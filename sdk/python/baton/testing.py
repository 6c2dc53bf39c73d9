"""A fake worker for unit tests of your own handlers, in process.

::

    from baton import testing

    def test_greets():
        reply = testing.run(handle, text="hi", model=["Hello!"])
        assert reply == {"action": "terminate", "output": "Hello!"}

:class:`FakeWorker` answers the handler's calls from scripts: ``model``
replies, ``tools`` (plain functions), recorded ``steps``, ``answers`` to
questions and ``children``'s results. It runs the same protocol engine as
``Agent.run``, minus the pipes, and keeps every call the handler made in
:attr:`FakeWorker.calls`. It does not reproduce the worker's guarantees
(journal, limits, approvals); test those against a real worker.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from ._agent import Agent
from ._server import Handler, Server

__all__ = ["FakeWorker", "model_reply", "run"]

ModelScript = Union[str, Mapping[str, Any]]
"""A scripted model reply: a text, a ``model`` result ``{"message": ...}``, or
an assistant message."""

ModelScripts = Union[Sequence[ModelScript], Callable[[list[dict[str, Any]]], ModelScript]]

ENVELOPE_ID = "00000000-0000-4000-8000-000000000001"
SESSION_ID = "00000000-0000-4000-8000-000000000002"


def model_reply(
    text: str = "",
    tool_calls: Sequence[tuple[str, Mapping[str, Any]] | Mapping[str, Any]] = (),
    *,
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``model`` call result, for :class:`FakeWorker`'s ``model`` script.

    ``tool_calls`` are ``(name, arguments)`` pairs (ids ``call_1``, ...) or
    OpenAI tool call dicts; arguments are sent as JSON text, as endpoints do.
    """
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls: list[dict[str, Any]] = []
    for n, call in enumerate(tool_calls, start=1):
        if isinstance(call, tuple):
            name, arguments = call
            calls.append(
                {
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(dict(arguments))},
                }
            )
        else:
            calls.append(dict(call))
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    return {
        "message": message,
        "usage": dict(usage) if usage is not None else {"prompt_tokens": 0, "completion_tokens": 0},
        "finish_reason": "tool_calls" if calls else "stop",
    }


def _model_result(script: ModelScript) -> dict[str, Any]:
    if isinstance(script, str):
        return model_reply(script)
    if "message" in script:
        return dict(script)
    message = dict(script)
    message.setdefault("role", "assistant")
    return {
        "message": message,
        "usage": {},
        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
    }


class FakeWorker:
    """Runs a handler the way a worker would, answering its calls from scripts.

    Args:
        model: Replies for ``ctx.model``, in order (see :func:`model_reply`),
            or a function of the messages returning one.
        tools: ``{name: fn}``: ``ctx.tool(name, args)`` returns ``fn(**args)``
            (a ``str``, or any JSON value sent as JSON text; an exception is
            an ``is_error`` result). ``ctx.tools()`` lists them.
        steps: ``{name: value}``: the journal already holds these steps'
            values, so ``ctx.step`` returns them without running.
        answers: The user's answers to ``ctx.ask``, in order.
        children: Results for ``ctx.delegate``: a list of result lists, one
            per call, or a function ``(children, mode) -> results``.
        calls: Whether the worker answers calls at all.

    When a question has no answer left (or a delegation no results), the
    hop ends ``waiting`` as with a real worker: the handler is cancelled and
    :meth:`run` returns None. Everything the handler asked is kept in
    :attr:`calls`, :attr:`asked`, :attr:`said`, :attr:`delegated` and
    :attr:`step_values`.
    """

    def __init__(
        self,
        *,
        model: ModelScripts | None = None,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        steps: Mapping[str, Any] | None = None,
        answers: Sequence[str] = (),
        children: Sequence[Sequence[Mapping[str, Any]]]
        | Callable[[list[dict[str, Any]], str], Sequence[Mapping[str, Any]]]
        | None = None,
        calls: bool = True,
    ) -> None:
        self._model = model if callable(model) else list(model or [])
        self._tools = dict(tools or {})
        self._recorded = dict(steps or {})
        self._answers = list(answers)
        self._children = children if callable(children) else list(children or [])
        self._supports_calls = calls
        self.calls: list[dict[str, Any]] = []
        """Every call the handler sent, as sent."""
        self.asked: list[str] = []
        """The questions asked (``ctx.ask``)."""
        self.said: list[str] = []
        """The messages said (``ctx.say``)."""
        self.delegated: list[list[dict[str, Any]]] = []
        """The children of each ``ctx.delegate``."""
        self.step_values: dict[str, Any] = {}
        """The value of each step that ran, by name."""
        self.ended: str | None = None
        """``waiting`` (or ``failed``) when the hop ended without an answer."""
        self.reply: dict[str, Any] | None = None
        """The handler's answer, once it came."""
        self._step_seen: dict[str, int] = {}

    def run(
        self,
        handler: Handler | Agent,
        text: str = "hi",
        *,
        variables: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        envelope: Mapping[str, Any] | None = None,
        attempt: int = 1,
        resume: bool = False,
    ) -> dict[str, Any] | None:
        """Runs ``handler`` on one task and returns its exec reply (None when the hop ended).

        The task's envelope is ``envelope`` if given, else a task whose
        ``initial_query`` and only message are ``text``. ``messages`` are
        the OpenAI messages the worker sends with the request (default:
        the package maps the envelope's).
        """
        return asyncio.run(
            self.arun(
                handler,
                text,
                variables=variables,
                state=state,
                messages=messages,
                envelope=envelope,
                attempt=attempt,
                resume=resume,
            )
        )

    async def arun(
        self,
        handler: Handler | Agent,
        text: str = "hi",
        *,
        variables: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        envelope: Mapping[str, Any] | None = None,
        attempt: int = 1,
        resume: bool = False,
    ) -> dict[str, Any] | None:
        """:meth:`run`, for a test that already has an event loop."""
        if isinstance(handler, Agent):
            registered = handler.handler
            if registered is None:
                raise ValueError("the agent has no handler: decorate one with @agent.task")
            handler = registered
        if envelope is None:
            envelope = {
                "v": 1,
                "id": ENVELOPE_ID,
                "session": SESSION_ID,
                "kind": "task",
                "context": {
                    "initial_query": text,
                    "messages": [{"role": "user", "content": text}],
                    "variables": dict(variables or {}),
                    "state": dict(state or {}),
                },
            }
        request: dict[str, Any] = {
            "id": "1",
            "envelope": dict(envelope),
            "attempt": attempt,
            "resume": resume,
        }
        if self._supports_calls:
            request["calls"] = True
            request["no_wait"] = True
        if messages is not None:
            request["messages"] = [dict(m) for m in messages]
        self.reply = None
        self.ended = None
        loop = asyncio.get_running_loop()
        pending: set[asyncio.Task[None]] = set()
        server: Server

        def write(line: str) -> None:
            message = json.loads(line)
            if "call" in message:
                self.calls.append(message)
                task = loop.create_task(self._answer(server, message))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                self.reply = message["reply"]

        server = Server(handler, write, logging.getLogger("baton.testing"))
        server.dispatch(json.loads(json.dumps(request)))
        await server.drain()
        # Calls not waited for may still be being answered.
        await asyncio.gather(*pending)
        return self.reply

    async def _answer(self, server: Server, call: dict[str, Any]) -> None:
        answer: dict[str, Any] = {"call": call["call"]}
        try:
            answer.update(await self._outcome(call))
        except Exception as error:  # a bug in a scripted function
            answer["error"] = {"kind": "failed", "message": f"{type(error).__name__}: {error}"}
        if "end" in answer:
            self.ended = answer["end"]
        if call.get("wait") is False and "result" in answer:
            return  # a call not waited for is answered only with an error or an end
        server.dispatch(json.loads(json.dumps(answer)))

    async def _outcome(self, call: dict[str, Any]) -> dict[str, Any]:
        op = call["op"]
        if op == "tools":
            return {"result": {"tools": [self._describe(n, f) for n, f in self._tools.items()]}}
        if op == "model":
            if callable(self._model):
                return {"result": _model_result(self._model(call["messages"]))}
            if not self._model:
                return _refused("the fake worker has no scripted model reply left")
            return {"result": _model_result(self._model.pop(0))}
        if op == "tool":
            fn = self._tools.get(call["name"])
            if fn is None:
                return _refused(f"unknown tool {call['name']!r}")
            try:
                value = fn(**call.get("arguments", {}))
                if inspect.isawaitable(value):
                    value = await value
            except Exception as error:
                return {"result": {"text": f"{type(error).__name__}: {error}", "is_error": True}}
            text = value if isinstance(value, str) else json.dumps(value)
            return {"result": {"text": text, "is_error": False}}
        if op == "step":
            name = call["name"]
            seen = self._step_seen.get(name, 0) + 1
            self._step_seen[name] = seen
            if seen == 1 and name in self._recorded:
                return {"result": {"recorded": True, "value": self._recorded[name]}}
            return {"result": {"run": True, "key": f"{SESSION_ID}:step:{name}:{seen}"}}
        if op == "step_done":
            if "error" not in call:
                self.step_values[call["name"]] = call.get("value")
            return {"result": {}}
        if op == "ask":
            self.asked.append(call["question"])
            if not self._answers:
                return {"end": "waiting"}
            return {"result": {"answer": self._answers.pop(0)}}
        if op == "delegate":
            children: list[dict[str, Any]] = call["children"]
            self.delegated.append(children)
            mode = call.get("mode", "parallel")
            if callable(self._children):
                results = self._children(children, mode)
            elif self._children:
                results = self._children.pop(0)
            else:
                return {"end": "waiting"}
            return {"result": {"results": [dict(r) for r in results]}}
        if op == "say":
            self.said.append(call["text"])
            return {"result": {}}
        return _refused(f"unknown op {op!r}")

    @staticmethod
    def _describe(name: str, fn: Callable[..., Any]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": inspect.getdoc(fn) or "",
                "parameters": {"type": "object"},
            },
        }


def _refused(message: str) -> dict[str, Any]:
    return {"error": {"kind": "refused", "message": message}}


def run(
    handler: Handler | Agent,
    text: str = "hi",
    *,
    model: ModelScripts | None = None,
    tools: Mapping[str, Callable[..., Any]] | None = None,
    steps: Mapping[str, Any] | None = None,
    answers: Sequence[str] = (),
    children: Sequence[Sequence[Mapping[str, Any]]]
    | Callable[[list[dict[str, Any]], str], Sequence[Mapping[str, Any]]]
    | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    messages: Sequence[Mapping[str, Any]] | None = None,
    envelope: Mapping[str, Any] | None = None,
    attempt: int = 1,
    resume: bool = False,
) -> dict[str, Any] | None:
    """Runs ``handler`` once against a :class:`FakeWorker` and returns its reply.

    Returns the exec reply dict (``{"action": "terminate", "output": ...}``
    and so on), or None when the hop ended waiting (a question with no
    scripted answer). Use :class:`FakeWorker` directly to look at the calls.
    """
    worker = FakeWorker(model=model, tools=tools, steps=steps, answers=answers, children=children)
    return worker.run(
        handler,
        text,
        variables=variables,
        state=state,
        messages=messages,
        envelope=envelope,
        attempt=attempt,
        resume=resume,
    )

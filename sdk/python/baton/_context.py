"""What a handler can ask of the worker while its task is in flight: ``ctx``."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union, overload

from ._errors import CallError, StepError
from ._task import Task

__all__ = ["Child", "Context", "Reply", "ToolCall", "ToolResult"]

T = TypeVar("T")

Caller = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""Sends one call (op, fields) for the task and returns its ``result``."""

Offload = Callable[..., Awaitable[Any]]
"""Runs a plain function with its arguments off the event loop."""

_SAME_AS_JSON = (str, int, bool, type(None))

_STEP_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "baton_step_key", default=None
)


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for.

    Attributes:
        id: The call's id (a ``tool`` message answering it repeats it).
        name: The tool's name, as ``ctx.tools()`` lists it.
        arguments: The arguments, parsed from the model's JSON text; ``{}``
            when that text is not a JSON object.
        raw_arguments: The arguments as the model wrote them.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str

    def tool_message(self, content: str) -> dict[str, Any]:
        """The ``tool`` message that answers this call, for the next model call."""
        return {"role": "tool", "tool_call_id": self.id, "content": content}


@dataclass(frozen=True)
class Reply:
    """The model's answer to ``ctx.model``.

    Attributes:
        text: The assistant message's text (``""`` when it has none).
        tool_calls: The tool calls it asked for, in order.
        message: The assistant message, to append to the messages of the
            next model call.
        usage: Token usage as the endpoint reported it.
        finish_reason: Why the model stopped (``stop``, ``tool_calls``,
            ``length``, ...), when known.
        result: The call's whole result, as the worker sent it.
    """

    text: str
    tool_calls: list[ToolCall]
    message: dict[str, Any]
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_result(cls, result: Any) -> Reply:
        """Reads a ``model`` call's result: ``{"message", "usage", "finish_reason"}``."""
        result = result if isinstance(result, dict) else {}
        message = result.get("message")
        message = dict(message) if isinstance(message, dict) else {}
        message.setdefault("role", "assistant")
        content = message.get("content")
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            text = "".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        else:
            text = ""
        calls: list[ToolCall] = []
        raw_calls = message.get("tool_calls")
        for raw in raw_calls if isinstance(raw_calls, list) else []:
            if not isinstance(raw, dict):
                continue
            function = raw.get("function")
            function = function if isinstance(function, dict) else {}
            arguments = function.get("arguments")
            parsed: Any
            if isinstance(arguments, str):
                raw_text = arguments
                try:
                    parsed = json.loads(arguments) if arguments.strip() else {}
                except ValueError:
                    parsed = {}
            else:
                parsed = arguments if arguments is not None else {}
                raw_text = json.dumps(parsed)
            calls.append(
                ToolCall(
                    id=str(raw.get("id", "")),
                    name=str(function.get("name", "")),
                    arguments=parsed if isinstance(parsed, dict) else {},
                    raw_arguments=raw_text,
                )
            )
        usage = result.get("usage")
        finish = result.get("finish_reason")
        return cls(
            text=text,
            tool_calls=calls,
            message=message,
            usage=dict(usage) if isinstance(usage, dict) else {},
            finish_reason=finish if isinstance(finish, str) else None,
            result=result,
        )


@dataclass(frozen=True)
class ToolResult:
    """What an MCP tool answered to ``ctx.tool``.

    Attributes:
        text: The tool's answer as text.
        is_error: The tool reported an error (the call itself was made).
    """

    text: str
    is_error: bool = False


class Child:
    """A child task for ``ctx.delegate``: ask agent type ``to``, or the best
    agent with the capabilities ``requires`` (exactly one), to do ``input``.

    ``assignment`` (``sync`` or ``async``) is for a team's coordinator.
    """

    __slots__ = ("to", "requires", "input", "assignment")

    def __init__(
        self,
        *,
        input: str,
        to: str | None = None,
        requires: Sequence[str] | None = None,
        assignment: str | None = None,
    ) -> None:
        if (to is None) == (not requires):
            raise ValueError("a Child needs exactly one of `to` and `requires`")
        if isinstance(requires, str):
            raise TypeError("requires is a list of capabilities, not a string")
        self.to = to
        self.requires: list[str] = list(requires or [])
        self.input = input
        self.assignment = assignment

    def to_dict(self) -> dict[str, Any]:
        """The child as an exec reply's ``children`` entry."""
        child: dict[str, Any] = {}
        if self.to is not None:
            child["to"] = self.to
        if self.requires:
            child["requires"] = list(self.requires)
        child["input"] = self.input
        if self.assignment is not None:
            child["assignment"] = self.assignment
        return child

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Child) and other.to_dict() == self.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"Child({args})"


ChildLike = Union[Child, Mapping[str, Any]]


_VALUE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _plain(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with each :class:`Encoded` value read back as JSON."""
    return {k: json.loads(v.text) if type(v) is Encoded else v for k, v in fields.items()}


class Encoded:
    """A call field's value already written as JSON (a step's value, which
    is encoded once to check it): the call's line takes the text as is."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _json_problem(value: Any) -> str | None:
    """Why ``value`` is not JSON, or None when it is."""
    offender: list[Any] = []

    def refuse(obj: Any) -> Any:
        offender.append(obj)
        raise TypeError("not JSON")

    try:
        json.dumps(value, allow_nan=False, default=refuse)
    except ValueError:
        return "a float that is NaN or infinite, which is not JSON"
    except TypeError as error:
        if offender:
            kind = type(offender[0]).__name__
            if offender[0] is value:
                return f"a {kind}, which is not JSON"
            return f"a {type(value).__name__} holding a {kind}, which is not JSON"
        return f"a {type(value).__name__} that is not JSON ({error})"
    return None


class Context:
    """The handler's line to the worker: ``ctx`` in ``handler(task, ctx)``.

    Every awaitable method sends one call to the worker and waits for its
    result. The worker keeps each result in the hop journal before the
    handler sees it, so when the task runs again (after a crash, an answer
    from the user, the children's results), a call made before returns the
    recorded result at once instead of being made again. Calls may run at
    once (``asyncio.gather``); each is matched by its own id.

    A call the worker refuses or cannot make raises :class:`baton.CallError`.
    When the hop ends on a call (it waits for the user, the children or a
    person), the handler is cancelled and no answer is sent; the task runs
    again later, from the start, against the journal.
    """

    def __init__(
        self,
        task: Task,
        call: Caller,
        log: logging.LoggerAdapter[logging.Logger],
        offload: Offload | None = None,
        tell: Caller | None = None,
    ) -> None:
        self._task = task
        self._call = call
        # A call not waited for, where the worker takes one (a step's value:
        # the worker keeps it before anything the handler does next). A
        # caller that is not the package's own gets plain JSON values.
        self._tell: Caller = tell or (lambda op, fields: call(op, _plain(fields)))
        self._log = log
        self._offload: Offload = offload or asyncio.to_thread

    @property
    def task(self) -> Task:
        """The task being handled."""
        return self._task

    @property
    def log(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger writing to stderr (the worker logs each line with the session)."""
        return self._log

    @property
    def calls(self) -> bool:
        """Whether this worker answers calls (else every call raises ``CallError``)."""
        return self._task.calls

    @property
    def key(self) -> str:
        """The idempotency key of the step running now (inside ``ctx.step``'s function).

        It is the same on every delivery of the task: pass it to an external
        API that deduplicates by key.

        Raises:
            RuntimeError: read outside a step's function.
        """
        key = _STEP_KEY.get()
        if key is None:
            raise RuntimeError(
                "ctx.key is only known while a step runs: read it in the function given to ctx.step"
            )
        return key

    async def tools(self) -> list[dict[str, Any]]:
        """The spec's MCP tools, in OpenAI's ``tools`` format (``op: tools``)."""
        result = await self._call("tools", {})
        tools = result.get("tools") if isinstance(result, dict) else None
        return [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []

    async def model(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> Reply:
        """Ask the spec's ``[llm]`` model (``op: model``).

        ``messages`` are OpenAI chat messages (start from ``task.messages``),
        ``tools`` OpenAI tools (from :meth:`tools`), ``params`` other request
        fields (``temperature``, ``max_tokens``, ``tool_choice``,
        ``response_format``, ...). The worker applies the shared limits,
        budgets and streaming, and a rerun gets the recorded answer at zero
        tokens.
        """
        fields: dict[str, Any] = {"messages": [dict(m) for m in messages]}
        if tools:  # none offered: no `tools`, which endpoints refuse empty
            fields["tools"] = [dict(t) for t in tools]
        if params:
            fields["params"] = dict(params)
        return Reply.from_result(await self._call("model", fields))

    async def tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Call the MCP tool ``name`` with ``arguments`` (``op: tool``).

        The worker checks the arguments against the tool's schema, applies its
        class and approvals, and sends an unknown outcome to a person.
        """
        result = await self._call("tool", {"name": name, "arguments": dict(arguments or {})})
        result = result if isinstance(result, dict) else {}
        text = result.get("text")
        return ToolResult(
            text=text if isinstance(text, str) else "", is_error=result.get("is_error") is True
        )

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> T: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> T: ...

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` as a journaled step named ``name``.

        When the journal holds the step's value (the task runs again), it is
        returned without calling ``fn``. Else ``fn`` runs (a plain function in
        a thread, so the loop goes on; an ``async def`` awaited), with
        :attr:`key` set to the step's idempotency key, and its value is
        journaled before it is returned. The value must be JSON; it comes back
        as JSON would give it (tuples become lists), so a first run and a
        rerun see equal values.

        A step that started and left no value (the program died) runs again
        on the next delivery only when ``idempotent``; otherwise a person
        decides whether it happened.

        Raises:
            StepError: ``fn`` returned a value that is not JSON.
            Exception: whatever ``fn`` raised (the worker is told, and the
                step runs again on the next run).
        """
        result = await self._call("step", {"name": name, "idempotent": idempotent})
        result = result if isinstance(result, dict) else {}
        if result.get("recorded") is True:
            return result.get("value")
        key = result.get("key")
        if result.get("run") is not True or not isinstance(key, str):
            raise CallError("failed", f"the worker's answer to step {name!r} is not understood: {result!r}")
        token = _STEP_KEY.set(key)
        try:
            if inspect.iscoroutinefunction(fn):
                value: Any = await fn(*args, **kwargs)
            else:
                value = await self._offload(fn, *args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
        except asyncio.CancelledError:
            raise
        except Exception as error:
            try:
                await self._tell("step_done", {"name": name, "key": key, "error": str(error) or type(error).__name__})
            except CallError as told:
                self._log.warning("could not tell the worker that step %r failed: %s", name, told)
            raise
        finally:
            _STEP_KEY.reset(token)
        try:
            text = _VALUE.encode(value)
        except (TypeError, ValueError):
            problem = _json_problem(value) or f"a {type(value).__name__} that is not JSON"
            message = f"step {name!r} returned {problem}"
            try:
                await self._tell("step_done", {"name": name, "key": key, "error": message})
            except CallError as told:
                self._log.warning("could not tell the worker that step %r failed: %s", name, told)
            raise StepError(message) from None
        # As JSON gives it back, so a first run and a rerun see equal values
        # (a str, int, bool or None is already).
        if type(value) not in _SAME_AS_JSON:
            value = json.loads(text)
        await self._tell("step_done", {"name": name, "key": key, "value": Encoded(text)})
        return value

    async def ask(
        self, question: str, schema: Union[dict[str, Any], None] = None
    ) -> str:
        """Ask the user ``question`` and return the answer (``op: ask``).

        The first time, the hop ends here and waits for the user (the handler
        is cancelled); when the answer comes, the task runs again and this
        call returns it. ``schema`` is the answer asked for, a JSON Schema
        of an object with flat properties: an MCP client that answers
        elicitations is asked with it, and the answer is then its result as
        JSON (``{"action": ..., "content": {...}}``).
        """
        said: dict[str, Any] = {"question": question}
        if schema is not None:
            said["schema"] = schema
        result = await self._call("ask", said)
        answer = result.get("answer") if isinstance(result, dict) else None
        return answer if isinstance(answer, str) else ""

    async def delegate(
        self, children: Sequence[ChildLike], mode: str = "parallel"
    ) -> list[dict[str, Any]]:
        """Hand out child tasks and return their results (``op: delegate``).

        ``children`` are :class:`Child` objects or dicts as an exec reply's
        (``{"to" | "requires", "input"}``); ``mode`` is ``parallel``,
        ``serial`` or ``chain``. Each result is a dict with ``index``,
        ``agent``, ``tag``, ``status``, ``output`` and ``detail``. As with
        :meth:`ask`, the hop waits for the children and runs again.
        """
        built: list[dict[str, Any]] = []
        for child in children:
            if isinstance(child, Child):
                built.append(child.to_dict())
            elif isinstance(child, Mapping):
                if not isinstance(child.get("input"), str):
                    raise ValueError(f"a child needs an `input` text: {dict(child)!r}")
                built.append(dict(child))
            else:
                raise TypeError(f"a child is a baton.Child or a dict, not {type(child).__name__}")
        result = await self._call("delegate", {"children": built, "mode": mode})
        results = result.get("results") if isinstance(result, dict) else None
        return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []

    async def say(self, text: str) -> None:
        """Add ``text`` to the conversation as this agent's message (``op: say``)."""
        await self._call("say", {"text": text})

"""The protocol engine: requests in, calls and answers out.

It knows nothing of pipes: :class:`Server` is given each line the worker
sent (parsed) through :meth:`Server.dispatch` and writes whole lines through
the ``write`` function it was made with. ``Agent.run`` connects it to the
worker's pipes; ``baton.testing`` to an in-process fake worker.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from ._context import Context, Encoded
from ._errors import CallError, Fatal
from ._outcomes import Outcome
from ._task import Task
from ._threads import Threads

__all__ = ["Handler", "Server", "encode", "reply_of", "reply_of_error"]

Handler = Callable[[Task, Context], Awaitable[Any]]
"""``async def handler(task, ctx)``."""

UNSUPPORTED = "this worker does not answer calls: upgrade baton"
CLOSED = "the worker closed the program's stdin"


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode(message: Any) -> str:
    """One protocol line (without its newline): compact JSON, NaN refused."""
    return _ENCODER.encode(message)


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def reply_of(result: Any) -> dict[str, Any]:
    """The exec reply for what a handler returned."""
    if isinstance(result, Outcome):
        return result.reply
    if isinstance(result, str):
        # A text answer is said in the conversation too, as an LLM agent's is.
        return {"action": "terminate", "output": result, "say": result} if result else {"action": "terminate", "output": result}
    if isinstance(result, dict):
        return {"action": "terminate", "output": result}
    kind = "None" if result is None else type(result).__name__
    return {
        "action": "fail",
        "error": "a handler returns a str, a dict, or one of "
        f"baton.complete/handoff/escalate/reject/fail; it returned {kind}",
        "retryable": False,
    }


def reply_of_error(error: BaseException) -> dict[str, Any]:
    """The exec reply for what a handler raised.

    :class:`baton.Fatal` (and :class:`baton.StepError`) fail for good, a
    :class:`baton.CallError` fails for good unless its kind is ``failed``,
    anything else is retryable.
    """
    if isinstance(error, Fatal):
        retryable = False
    elif isinstance(error, CallError):
        retryable = error.retryable
    else:
        retryable = True
    return {"action": "fail", "error": _describe(error), "retryable": retryable}


if TYPE_CHECKING:
    _Adapter = logging.LoggerAdapter[logging.Logger]
else:
    _Adapter = logging.LoggerAdapter


class _TaskLog(_Adapter):
    """Prefixes each line with the request's id."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"task {self.extra['task'] if self.extra else '?'}: {msg}", kwargs


class _Run:
    """One request in flight."""

    __slots__ = ("id", "calls_supported", "no_wait", "task", "ended", "calls")

    def __init__(self, request_id: str, calls_supported: bool, no_wait: bool) -> None:
        self.id = request_id
        self.calls_supported = calls_supported
        self.no_wait = no_wait
        self.task: asyncio.Task[None] | None = None
        self.ended = False
        self.calls: set[str] = set()


class Server:
    """Runs a handler for each request and matches call results to calls.

    Every request runs as its own asyncio task; calls are matched by their
    ``call`` id, so any number may be in flight, answered in any order.
    """

    def __init__(
        self, handler: Handler, write: Callable[[str], None], log: logging.Logger, threads: int = 64
    ) -> None:
        """``write`` writes one whole line (it adds the newline); plain step
        functions run in up to ``threads`` threads."""
        self._handler = handler
        self._thread_limit = threads
        self._threads: Threads | None = None
        self._write = write
        self._log = log
        self._ids = itertools.count(1)
        self._running: dict[str, _Run] = {}
        self._calls: dict[str, tuple[asyncio.Future[Any], _Run]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._broken = False

    @property
    def in_flight(self) -> int:
        """How many requests are being handled."""
        return len(self._running)

    def dispatch(self, message: Any) -> None:
        """Handles one line from the worker: a request or a call result."""
        if not isinstance(message, dict):
            self._log.warning("skipped a line from the worker that is not a JSON object")
        elif "call" in message:
            self._result(message)
        elif "id" in message and "envelope" in message:
            self._start(message)
        else:
            self._log.warning("skipped a line from the worker that is neither a request nor a call result")

    def close(self) -> None:
        """The worker closed our stdin: calls in flight and to come fail."""
        self._closing = True
        for call_id, (future, _run) in list(self._calls.items()):
            if not future.done():
                future.set_exception(CallError("failed", CLOSED))
            del self._calls[call_id]

    async def drain(self) -> None:
        """Waits until every handler has finished, then lets the step threads go."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._threads is not None:
            self._threads.close()

    def _start(self, request: dict[str, Any]) -> None:
        request_id = request["id"]
        if not isinstance(request_id, str):
            request_id = str(request_id)
            request = {**request, "id": request_id}
        if request_id in self._running:
            self._log.warning("skipped request %r: a request with that id is in flight", request_id)
            return
        if self._threads is None:
            self._threads = Threads(asyncio.get_running_loop(), self._thread_limit)
        calls = request.get("calls") is True
        run = _Run(request_id, calls, calls and request.get("no_wait") is True)
        self._running[request_id] = run
        task = asyncio.get_running_loop().create_task(self._serve(run, request))
        run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, run: _Run, request: dict[str, Any]) -> None:
        log = _TaskLog(self._log, {"task": run.id})
        try:
            task = Task(request)
            ctx = Context(
                task,
                lambda op, fields: self._call(run, op, fields),
                log,
                self._threads.run if self._threads else None,
                lambda op, fields: self._call(run, op, fields, wait=False),
            )
            reply = reply_of(await self._handler(task, ctx))
        except asyncio.CancelledError as error:
            current = asyncio.current_task()
            cancelling = getattr(current, "cancelling", None)
            if run.ended or (cancelling is not None and cancelling() > 0):
                if run.ended:
                    return
                raise
            # Not cancelled by us: something inside the handler was.
            log.warning("failed: the handler raised CancelledError")
            reply = reply_of_error(error)
        except Exception as error:
            if isinstance(error, (Fatal, CallError)):
                log.warning("failed: %s", _describe(error))
            else:
                log.error("failed: %s", _describe(error), exc_info=error)
            reply = reply_of_error(error)
        finally:
            self._forget_calls(run)
        if run.ended:
            return
        self._running.pop(run.id, None)
        try:
            line = encode({"id": run.id, "reply": reply})
        except (TypeError, ValueError) as error:
            reply = {
                "action": "fail",
                "error": f"the handler's answer is not JSON: {error}",
                "retryable": False,
            }
            line = encode({"id": run.id, "reply": reply})
        self._send(line)

    def _send(self, line: str) -> bool:
        try:
            self._write(line)
            return True
        except OSError as error:
            if not self._broken:
                self._log.error("cannot write to the worker: %s", error)
                self._broken = True
            return False

    async def _call(self, run: _Run, op: str, fields: dict[str, Any], wait: bool = True) -> Any:
        """Sends one call and returns its result; with ``wait=False`` (where
        the worker takes it), returns ``None`` once sent: the worker answers
        only an error (logged) or an end (the handler is cancelled)."""
        if run.ended:
            raise asyncio.CancelledError()
        if not run.calls_supported:
            raise CallError("unsupported", UNSUPPORTED)
        if self._closing:
            raise CallError("failed", CLOSED)
        wait = wait or not run.no_wait
        # A call not waited for is not kept: its id names its run, for the
        # error or the end that may come back.
        call_id = f"c{next(self._ids)}" if wait else f"u{next(self._ids)}.{run.id}"
        try:
            head: dict[str, Any] = {"call": call_id, "task": run.id} if wait else {"call": call_id, "task": run.id, "wait": False}
            value = fields.get("value")
            if type(value) is Encoded:
                rest = {k: v for k, v in fields.items() if k != "value"}
                line = encode({**head, "op": op, **rest})[:-1] + ',"value":' + value.text + "}"
            else:
                line = encode({**head, "op": op, **fields})
        except (TypeError, ValueError) as error:
            raise TypeError(f"ctx call {op!r}: its fields are not JSON: {error}") from error
        if not wait:
            if not self._send(line):
                raise CallError("failed", "cannot write to the worker")
            return None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = (future, run)
        run.calls.add(call_id)
        try:
            if not self._send(line):
                raise CallError("failed", "cannot write to the worker")
            return await future
        finally:
            self._calls.pop(call_id, None)
            run.calls.discard(call_id)

    def _result(self, message: dict[str, Any]) -> None:
        call_id = message.get("call")
        pending = self._calls.pop(call_id, None) if isinstance(call_id, str) else None
        if pending is None:
            self._unawaited_result(call_id, message)
            return
        future, run = pending
        run.calls.discard(call_id)
        end = message.get("end")
        error = message.get("error")
        if end is not None:
            self._end(run, str(end), message.get("message"))
        elif future.done():
            return
        elif error is not None:
            error = error if isinstance(error, dict) else {"message": str(error)}
            future.set_exception(
                CallError(str(error.get("kind", "failed")), str(error.get("message", "")))
            )
        else:
            future.set_result(message.get("result"))

    def _unawaited_result(self, call_id: Any, message: dict[str, Any]) -> None:
        """A line for a call not waited for (``u<n>.<run id>``): an end stops
        its run's handler, an error is logged, a result is not needed."""
        run = None
        if isinstance(call_id, str) and call_id.startswith("u") and "." in call_id:
            run = self._running.get(call_id.split(".", 1)[1])
        if run is None:
            self._log.debug("skipped a result for call %r, which is not in flight", call_id)
            return
        end = message.get("end")
        error = message.get("error")
        if end is not None:
            self._end(run, str(end), message.get("message"))
        elif error is not None:
            why = error.get("message", error) if isinstance(error, dict) else error
            self._log.warning("task %s: a call not waited for (%s) failed: %s", run.id, call_id, why)

    def _end(self, run: _Run, end: str, why: Any) -> None:
        """The hop ends: the handler is cancelled and sends no answer."""
        if run.ended:
            return
        run.ended = True
        self._running.pop(run.id, None)
        detail = f" ({why})" if isinstance(why, str) and why else ""
        log = self._log.warning if end == "failed" else self._log.info
        log("task %s: the hop ends here: %s%s", run.id, end, detail)
        self._forget_calls(run)
        if run.task is not None:
            run.task.cancel()

    def _forget_calls(self, run: _Run) -> None:
        for call_id in list(run.calls):
            pending = self._calls.pop(call_id, None)
            if pending is not None and not pending[0].done():
                pending[0].cancel()
        run.calls.clear()

"""``baton.Agent``: registers the handler and serves the worker's pipes."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from ._server import Handler, Server

__all__ = ["Agent"]

_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def _exit(message: str) -> NoReturn:
    sys.stderr.write(f"baton: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def _logger() -> logging.Logger:
    log = logging.getLogger("baton")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


class Agent:
    """A Baton agent written in Python, run by a worker as a persistent exec program.

    ::

        agent = baton.Agent()

        @agent.task
        async def handle(task: baton.Task, ctx: baton.Context):
            return f"You said: {task.text}"

        if __name__ == "__main__":
            agent.run()

    The spec runs it with ``[exec] command = ["python3", "agent.py"]`` and
    ``mode = "persistent"``.
    """

    def __init__(self) -> None:
        self._handler: Handler | None = None

    @property
    def handler(self) -> Handler | None:
        """The registered handler, if any."""
        return self._handler

    def task(self, handler: Handler) -> Handler:
        """Decorator: ``handler(task, ctx)`` (an ``async def``) handles each task.

        It returns a ``str`` or ``dict`` (the session completes with it as
        the output) or an outcome (``baton.complete``, ``handoff``,
        ``escalate``, ``reject``, ``fail``, ``answer``). Raising fails the
        attempt: retryable, or for good with :class:`baton.Fatal`.

        Raises:
            TypeError: ``handler`` is not an ``async def`` function.
        """
        if not inspect.iscoroutinefunction(handler):
            raise TypeError("@agent.task needs an `async def handler(task, ctx)`")
        self._handler = handler
        return handler

    def run(self) -> None:
        """Serves the worker's requests on stdin/stdout until stdin closes.

        Blocks, running an asyncio loop; each request is its own asyncio
        task. Before reading, it keeps a private descriptor for the
        protocol and points descriptor 1 at stderr, so ``print`` and
        subprocesses write to the worker's log, never into the protocol;
        descriptor 0 is pointed at ``/dev/null`` likewise.

        Exits with status 2 when not started by a worker in persistent mode
        (``BATON_EXEC_MODE`` is not ``persistent``) or when no handler is
        registered.
        """
        if os.environ.get("BATON_EXEC_MODE") != "persistent":
            _exit(
                "this program is a persistent exec agent: set mode = \"persistent\" under [exec] "
                "in the agent's spec (BATON_EXEC_MODE is not \"persistent\")"
            )
        handler = self._handler
        if handler is None:
            _exit("no handler: decorate an `async def handler(task, ctx)` with @agent.task before agent.run()")
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        out_fd = os.dup(1)
        in_fd = os.dup(0)
        os.dup2(2, 1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
        try:
            asyncio.run(_serve(handler, in_fd, out_fd))
        except KeyboardInterrupt:
            raise SystemExit(130) from None


def _writer(fd: int) -> Callable[[str], None]:
    """Writes whole lines on ``fd``. Lines written on the event loop wait in
    a buffer until the loop's current turn ends, then go in one write, so
    many tasks' calls and answers cost one system call; from another thread
    a line goes at once. The order of lines is kept."""
    lock = threading.Lock()
    pending: list[str] = []

    broken: list[OSError] = []

    def flush() -> None:
        with lock:
            data = memoryview("".join(pending).encode("utf-8", errors="replace"))
            pending.clear()
            try:
                while data and not broken:
                    written = os.write(fd, data)
                    data = data[written:]
            except OSError as error:  # the worker is gone: say it once
                broken.append(error)
                logging.getLogger("baton").error("cannot write to the worker: %s", error)

    def write(line: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with lock:
            first = not pending
            pending.append(line + "\n")
        if loop is None:
            flush()
        elif first:
            loop.call_soon(flush)

    return write


def _reader(fd: int, loop: asyncio.AbstractEventLoop, server: Server, done: asyncio.Event) -> None:
    log = logging.getLogger("baton")
    with open(fd, "rb", buffering=1 << 20, closefd=False) as stream:
        for raw in stream:
            if not raw.strip():
                continue
            try:
                message = json.loads(raw)
            except ValueError as error:
                log.warning("skipped a line from the worker that is not JSON: %s", error)
                continue
            try:
                loop.call_soon_threadsafe(server.dispatch, message)
            except RuntimeError:  # the loop is closed: the program is exiting
                return
    try:
        loop.call_soon_threadsafe(done.set)
    except RuntimeError:
        pass


class _Lines(asyncio.Protocol):
    """Reads the worker's lines on the event loop, without a thread: each
    whole line is parsed and handed to the server as it arrives."""

    def __init__(self, server: Server, done: asyncio.Event) -> None:
        self._server = server
        self._done = done
        self._buffer = bytearray()
        self._searched = 0
        self._log = logging.getLogger("baton")

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while True:
            end = buffer.find(b"\n", max(start, self._searched))
            if end < 0:
                break
            raw = buffer[start:end].decode("utf-8", errors="replace")
            start = end + 1
            self._searched = start
            if raw.strip():
                try:
                    message = json.loads(raw)
                except ValueError as error:
                    self._log.warning("skipped a line from the worker that is not JSON: %s", error)
                    continue
                self._server.dispatch(message)
        if start:
            del buffer[:start]
        # A long line is searched once: the next chunk is searched from here.
        self._searched = len(buffer)

    def eof_received(self) -> bool:
        self._done.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._done.set()


async def _serve(handler: Handler, in_fd: int, out_fd: int) -> None:
    loop = asyncio.get_running_loop()
    threads = int(os.environ.get("BATON_THREADS", "64") or "64")
    server = Server(handler, _writer(out_fd), _logger(), threads)
    eof = asyncio.Event()
    pipe = open(in_fd, "rb", buffering=0, closefd=False)
    try:
        await loop.connect_read_pipe(lambda: _Lines(server, eof), pipe)
    except ValueError:
        # Not a pipe (a file, say): read it in a thread instead.
        reader = threading.Thread(
            target=_reader, args=(in_fd, loop, server, eof), name="baton-stdin", daemon=True
        )
        reader.start()
    await eof.wait()
    server.close()
    await server.drain()

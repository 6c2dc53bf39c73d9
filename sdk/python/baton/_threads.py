"""Plain functions run off the event loop, cheaply.

``ctx.step`` runs a plain function in a thread so the loop goes on. With
many tasks in flight, ``asyncio.to_thread`` costs more than a short step
itself: a pool future, a wrapped future and a wake-up of the loop for each
call. :class:`Threads` keeps the same semantics (each function in its own
thread as long as threads are free, in the caller's context variables) with
one queue in and one batched wake-up out: results that finish while the
loop is busy reach it together.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Threads"]

_Job = tuple["asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_Done = tuple["asyncio.Future[Any]", bool, Any]


class Threads:
    """Up to ``limit`` threads, started when a job finds none idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._limit = max(1, limit)
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job no one has claimed
        self._queued = 0  # jobs no thread was free for
        self._done: list[_Done] = []

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """``fn(*args, **kwargs)`` in a thread, in a copy of this context."""
        future: asyncio.Future[Any] = self._loop.create_future()
        self._jobs.put((future, contextvars.copy_context(), fn, args, kwargs))
        with self._lock:
            if self._idle:
                self._idle -= 1
                return future
            if self._threads >= self._limit:
                self._queued += 1
                return future
            self._threads += 1
        threading.Thread(target=self._serve, name=f"baton-step-{self._threads}", daemon=True).start()
        return future

    def close(self) -> None:
        """Idle threads end; busy ones end after their job."""
        with self._lock:
            count = self._threads
        for _ in range(count):
            self._jobs.put(None)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            future, context, fn, args, kwargs = job
            try:
                done: _Done = (future, True, context.run(fn, *args, **kwargs))
            except BaseException as error:  # handed to the awaiting step
                done = (future, False, error)
            del job, fn, args, kwargs
            with self._lock:
                first = not self._done
                self._done.append(done)
                if self._queued:
                    self._queued -= 1
                else:
                    self._idle += 1
            del done
            if first:
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: the program is exiting
                    return

    def _deliver(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for future, ok, value in done:
            if future.cancelled():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

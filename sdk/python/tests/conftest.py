"""A fake worker that drives an agent program through its pipes, as Baton does."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SDK = Path(__file__).resolve().parent.parent
AGENTS = Path(__file__).resolve().parent / "agents"
REPO = SDK.parent.parent
# BATON_VECTORS_DIR: another directory of vectors (to try new ones before they land).
VECTORS = Path(os.environ.get("BATON_VECTORS_DIR") or REPO / "proto-schemas" / "vectors")

if str(SDK) not in sys.path:  # the package under test, without installing it
    sys.path.insert(0, str(SDK))


def envelope(text: str = "hi", **variables: Any) -> dict[str, Any]:
    """A task envelope whose only message is `text`."""
    return {
        "v": 1,
        "id": "10000000-0000-4000-8000-000000000001",
        "session": "10000000-0000-4000-8000-000000000002",
        "kind": "task",
        "context": {
            "initial_query": text,
            "messages": [{"role": "user", "content": text, "at": 1}],
            "variables": variables,
        },
    }


class Worker:
    """Starts a program in persistent mode; writes requests, reads its lines."""

    def __init__(self, script: str, env: dict[str, str] | None = None) -> None:
        full_env = {
            **os.environ,
            "PYTHONPATH": str(SDK),
            "BATON_EXEC_MODE": "persistent",
            "BATON_AGENT": "kitchen",
            "PYTHONUNBUFFERED": "",
        }
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENTS / script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        self.lines: queue.Queue[Any] = queue.Queue()
        self.raw: list[bytes] = []
        self.stderr: list[str] = []
        self._write = threading.Lock()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw.append(line)
            try:
                self.lines.put(json.loads(line))
            except ValueError:
                self.lines.put({"NOT JSON": line.decode("utf-8", "replace")})
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._write:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()

    def request(
        self, rid: str, case: str, text: str = "hi", calls: bool = True, **extra: Any
    ) -> None:
        message: dict[str, Any] = {"id": rid, "envelope": envelope(text, case=case), "attempt": 1}
        if calls:
            message["calls"] = True
        message.update(extra)
        self.send(message)

    def recv(self, timeout: float = 10) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no line from the program in {timeout}s; stderr:\n{''.join(self.stderr)}"
            ) from None
        assert line is not None, f"the program closed stdout; stderr:\n{''.join(self.stderr)}"
        assert isinstance(line, dict)
        assert "NOT JSON" not in line, f"a stdout line that is not JSON: {line['NOT JSON']!r}"
        return line

    def answer(self, rid: str, timeout: float = 10) -> dict[str, Any]:
        """The next line, which must be the answer to `rid`; returns its reply."""
        line = self.recv(timeout)
        assert set(line) == {"id", "reply"}, line
        assert line["id"] == rid, line
        reply = line["reply"]
        assert isinstance(reply, dict)
        return reply

    def call(self, timeout: float = 10) -> dict[str, Any]:
        """The next line, which must be a call."""
        line = self.recv(timeout)
        assert "call" in line and "op" in line, line
        return line

    def result(self, call: dict[str, Any], result: Any) -> None:
        self.send({"call": call["call"], "result": result})

    def nothing(self, wait: float = 0.3) -> None:
        """Asserts the program writes nothing for `wait` seconds."""
        try:
            line = self.lines.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected line: {line}")

    def close(self, timeout: float = 10) -> int:
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout)


@pytest.fixture
def worker() -> Iterator[Worker]:
    w = Worker("kitchen.py")
    yield w
    if w.proc.poll() is None:
        try:
            w.close(timeout=5)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()

"""Baton agents in Python.

Write a handler, and a Baton worker runs it as a persistent exec program
(``[exec] mode = "persistent"``)::

    import baton

    agent = baton.Agent()

    @agent.task
    async def handle(task: baton.Task, ctx: baton.Context):
        reply = await ctx.model(task.messages)
        return reply.text

    agent.run()

The worker owns NATS, acknowledgements, the hop journal, limits and
approvals; this package speaks the worker's line protocol on stdin and
stdout (``proto-schemas/exec-calls.md``). See ``docs/agents/python.md``.
"""

from __future__ import annotations

from ._a2a import a2a_artifact, a2a_artifacts, a2a_data, a2a_file, a2a_message, a2a_reject
from ._agent import Agent
from ._context import Child, Context, Reply, ToolCall, ToolResult
from ._errors import CallError, Fatal, StepError
from ._outcomes import Outcome, answer, complete, escalate, fail, fallback, handoff, reject
from ._task import Task, openai_messages

from . import testing  # last: it uses the modules above

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "CallError",
    "Child",
    "Context",
    "Fatal",
    "Outcome",
    "Reply",
    "StepError",
    "Task",
    "ToolCall",
    "ToolResult",
    "a2a_artifact",
    "a2a_artifacts",
    "a2a_data",
    "a2a_file",
    "a2a_message",
    "a2a_reject",
    "answer",
    "complete",
    "escalate",
    "fail",
    "fallback",
    "handoff",
    "openai_messages",
    "reject",
    "testing",
]

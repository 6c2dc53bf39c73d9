"""The task a handler works on, read from the worker's request."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["Task", "openai_messages"]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text_of(content: Any) -> str | None:
    """The text of an OpenAI message's content: a str, or text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        return "".join(texts) if texts else None
    return None


def openai_messages(messages: Any) -> list[dict[str, Any]]:
    """An envelope's ``context.messages`` as OpenAI chat messages.

    Role ``user`` stays ``user``, ``system`` stays ``system``, ``tool``
    becomes a ``tool`` message with its ``tool_call_id`` (and no ``name``),
    anything else (``agent``) becomes ``assistant``. ``name`` and
    ``tool_calls`` are kept; other fields (``at``, ...) are left out.
    Entries that are not objects are skipped.
    """
    out: list[dict[str, Any]] = []
    if not isinstance(messages, list):
        return out
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        mapped: dict[str, Any]
        if role == "tool":
            mapped = {"role": "tool", "content": content if content is not None else ""}
            if message.get("tool_call_id") is not None:
                mapped["tool_call_id"] = message["tool_call_id"]
            out.append(mapped)
            continue
        mapped = {
            "role": role if role in ("user", "system") else "assistant",
            "content": content if content is not None else "",
        }
        if isinstance(message.get("name"), str):
            mapped["name"] = message["name"]
        if message.get("tool_calls") is not None:
            mapped["tool_calls"] = message["tool_calls"]
        out.append(mapped)
    return out


class Task:
    """One task (a hop of a session), as the worker's request carries it.

    Attributes:
        id: The request's id (unique for the program's life).
        envelope: The envelope, as the raw JSON dict.
        attempt: The delivery attempt, from 1.
        resume: Whether the agent runs again after a delegation it replied
            with (the children's results are in ``state["results"]``).
        messages: The conversation so far as OpenAI chat messages, ready for
            ``ctx.model``: the request's ``messages`` when the worker sent
            them, else ``envelope.context.messages`` mapped
            (see :func:`openai_messages`).
    """

    __slots__ = ("id", "envelope", "attempt", "resume", "messages", "calls", "_request")

    def __init__(self, request: Mapping[str, Any]) -> None:
        """Reads a request: ``{"id", "envelope", "attempt", "resume", "calls", "messages"}``."""
        self._request = dict(request)
        self.id: str = str(request.get("id", ""))
        self.envelope: dict[str, Any] = _dict(request.get("envelope"))
        attempt = request.get("attempt")
        self.attempt: int = attempt if isinstance(attempt, int) else 1
        self.resume: bool = request.get("resume") is True
        self.calls: bool = request.get("calls") is True
        given = request.get("messages")
        self.messages: list[dict[str, Any]] = (
            [m for m in given if isinstance(m, dict)]
            if isinstance(given, list)
            else openai_messages(self.context.get("messages"))
        )

    @property
    def request(self) -> dict[str, Any]:
        """The worker's request, as the raw JSON dict."""
        return self._request

    @property
    def context(self) -> dict[str, Any]:
        """The envelope's ``context`` (``{}`` when absent)."""
        return _dict(self.envelope.get("context"))

    @property
    def text(self) -> str:
        """The latest user message's text, else the context's ``initial_query``."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                text = _text_of(message.get("content"))
                if text is not None:
                    return text
        query = self.context.get("initial_query")
        return query if isinstance(query, str) else ""

    @property
    def variables(self) -> dict[str, Any]:
        """The shared context variables (``context.variables``)."""
        return _dict(self.context.get("variables"))

    @property
    def state(self) -> dict[str, Any]:
        """The state the sender handed over (``context.state``)."""
        return _dict(self.context.get("state"))

    @property
    def session(self) -> str:
        """The session's id (shared by every hop of one task)."""
        session = self.envelope.get("session")
        return session if isinstance(session, str) else ""

    @property
    def conversation(self) -> str | None:
        """The id of the conversation this turn belongs to, else None.

        Read from the envelope's ``conversation`` (``{"id": ..., "turn": ...}``).
        """
        conversation = self.envelope.get("conversation")
        if isinstance(conversation, dict):
            for key in ("id", "conversation"):
                value = conversation.get(key)
                if isinstance(value, str) and value:
                    return value
            return None
        if isinstance(conversation, str) and conversation:
            return conversation
        return None

    @property
    def turn(self) -> int | None:
        """The conversation's turn (from 1), or None outside a conversation."""
        conversation = self.envelope.get("conversation")
        if isinstance(conversation, dict):
            turn = conversation.get("turn")
            if isinstance(turn, int):
                return turn
        return None

    @property
    def agent(self) -> str | None:
        """This agent's type (``BATON_AGENT``), or None when unset."""
        return os.environ.get("BATON_AGENT") or None

    @property
    def version(self) -> str | None:
        """The version of this agent type the session is pinned to, or None.

        Read from the envelope's ``versions`` for ``BATON_AGENT``.
        """
        agent = self.agent
        versions = self.envelope.get("versions")
        if agent is None or not isinstance(versions, dict):
            return None
        version = versions.get(agent)
        if version is None:
            return None
        return version if isinstance(version, str) else str(version)

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, session={self.session!r}, attempt={self.attempt})"

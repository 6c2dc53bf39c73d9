"""What a handler returns: an :class:`Outcome`, built by the functions here.

Each outcome is the exec reply the worker reads
(``proto-schemas/schema/exec_reply.schema.json``). A handler may also
return a plain ``str`` or ``dict``, which completes the session with it as
the output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "Outcome",
    "answer",
    "complete",
    "escalate",
    "fail",
    "fallback",
    "handoff",
    "reject",
]


class Outcome:
    """A handler's decision, as the exec reply the worker reads.

    Build one with :func:`complete`, :func:`answer`, :func:`handoff`,
    :func:`escalate`, :func:`fallback`, :func:`reject` or :func:`fail`;
    :attr:`reply` is the JSON object sent to the worker.
    """

    __slots__ = ("_reply",)

    def __init__(self, reply: Mapping[str, Any]) -> None:
        self._reply = dict(reply)

    @property
    def reply(self) -> dict[str, Any]:
        """The exec reply (a copy): ``{"action": ..., "output": ..., ...}``."""
        return dict(self._reply)

    @property
    def action(self) -> str | None:
        """The reply's ``action``, or None for :func:`answer`."""
        action = self._reply.get("action")
        return action if isinstance(action, str) else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and other._reply == self._reply

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"Outcome({self._reply!r})"


def _extras(
    reply: dict[str, Any],
    *,
    say: str | None,
    variables: Mapping[str, Any] | None,
    state: Mapping[str, Any] | None,
    hand_back: bool,
    messages: Sequence[Mapping[str, Any]] | None,
    trace: Sequence[Mapping[str, Any]] | None,
    problem: str | None,
) -> Outcome:
    if say is not None:
        reply["say"] = say
    if variables:
        reply["variables"] = dict(variables)
    if state:
        reply["state"] = dict(state)
    if messages:
        reply["messages"] = [dict(m) for m in messages]
    if trace:
        reply["trace"] = [dict(t) for t in trace]
    if problem is not None:
        reply["problem"] = problem
    if hand_back:
        reply["hand_back"] = True
    return Outcome(reply)


def _said(output: Any, say: str | None) -> str | None:
    """What an answer says in the conversation: ``say``, else a text output,
    as an LLM agent's answer is said."""
    if say is None and isinstance(output, str) and output:
        return output
    return say


def complete(
    output: Any,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """End the session now with ``output``, whatever the routing rules say.

    Reply: ``{"action": "terminate", "output": output}``; a text output is
    said in the conversation too (``say``), unless ``say`` is given. The keyword
    extras, on every outcome, add to the reply: ``say`` (a message to the
    conversation), ``variables`` (shared context variables to set),
    ``state`` (state for the receiver), ``hand_back`` (in a conversation's
    turn, the user's next message goes to the conversation's entry),
    ``messages`` (``{"role", "content", "name"}`` messages to append),
    ``trace`` (``{"action", "outcome", "reasoning", "details"}`` steps) and
    ``problem`` (the problem as the agent now understands it).
    """
    return _extras(
        {"action": "terminate", "output": output},
        say=_said(output, say),
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def answer(
    output: Any,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Give ``output`` and let the spec's routing rules decide what comes next.

    Reply: ``{"output": output}`` (no ``action``). Extras as for :func:`complete`.
    """
    return _extras(
        {"output": output},
        say=_said(output, say),
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def _need(
    reply: dict[str, Any],
    requires: Sequence[str] | None,
    domains: Sequence[str] | None,
    min_tier: int | None,
) -> None:
    if isinstance(requires, str) or isinstance(domains, str):
        raise TypeError("requires and domains are lists of strings, not a string")
    if requires:
        reply["requires"] = list(requires)
    if domains:
        reply["domains"] = list(domains)
    if min_tier is not None:
        reply["min_tier"] = min_tier


def handoff(
    to: str | None = None,
    requires: Sequence[str] | None = None,
    reason: str | None = None,
    suggested_next_action: str | None = None,
    domains: Sequence[str] | None = None,
    min_tier: int | None = None,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Hand the session to another agent: the type ``to``, or the best agent
    with the capabilities ``requires`` (exactly one of the two).

    ``domains`` and ``min_tier`` narrow a ``requires`` route. ``reason`` is
    why (``knowledge_gap``, ``out_of_scope``, ``tool_failure``, ... or free
    text; the worker's default is ``out_of_scope``);
    ``suggested_next_action`` is advice for the receiver.

    Raises:
        ValueError: neither or both of ``to`` and ``requires``, or
            ``domains``/``min_tier`` without ``requires``.
    """
    if (to is None) == (not requires):
        raise ValueError("handoff needs exactly one of `to` and `requires`")
    if to is not None and (domains or min_tier is not None):
        raise ValueError("handoff: `domains` and `min_tier` go with `requires`, not `to`")
    reply: dict[str, Any] = {"action": "handoff"}
    if to is not None:
        reply["to"] = to
    _need(reply, requires, domains, min_tier)
    if reason is not None:
        reply["reason"] = reason
    if suggested_next_action is not None:
        reply["suggested_next_action"] = suggested_next_action
    return _extras(
        reply,
        say=say,
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def escalate(
    requires: Sequence[str] | None = None,
    reason: str | None = None,
    domains: Sequence[str] | None = None,
    min_tier: int | None = None,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Escalate to a higher tier (or the fallback agent), optionally to an
    agent with the capabilities ``requires``.

    Reply: ``{"action": "escalate", "requires": [...], "reason": ...}``.
    """
    reply: dict[str, Any] = {"action": "escalate"}
    _need(reply, requires, domains, min_tier)
    if reason is not None:
        reply["reason"] = reason
    return _extras(
        reply,
        say=say,
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def fallback(
    reason: str | None = None,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Send the session straight to the fallback agent.

    Reply: ``{"action": "fallback", "reason": ...}``.
    """
    reply: dict[str, Any] = {"action": "fallback"}
    if reason is not None:
        reply["reason"] = reason
    return _extras(
        reply,
        say=say,
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def reject(
    reason: str,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Decline the task; it is routed elsewhere.

    Reply: ``{"action": "reject", "error": reason}`` (an exec reply carries
    a rejection's reason in ``error``).
    """
    return _extras(
        {"action": "reject", "error": reason},
        say=say,
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )


def fail(
    error: str,
    retryable: bool = False,
    *,
    say: str | None = None,
    variables: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    hand_back: bool = False,
    messages: Sequence[Mapping[str, Any]] | None = None,
    trace: Sequence[Mapping[str, Any]] | None = None,
    problem: str | None = None,
) -> Outcome:
    """Fail the attempt: delivered again when ``retryable``, else for good.

    Reply: ``{"action": "fail", "error": error, "retryable": retryable}``.
    Raising an exception does the same (retryable, or fatal for
    :class:`baton.Fatal`).
    """
    return _extras(
        {"action": "fail", "error": error, "retryable": retryable},
        say=say,
        variables=variables,
        state=state,
        hand_back=hand_back,
        messages=messages,
        trace=trace,
        problem=problem,
    )

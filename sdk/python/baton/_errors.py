"""The exceptions a handler may see or raise."""

from __future__ import annotations

__all__ = ["CallError", "Fatal", "StepError"]


class CallError(Exception):
    """A call to the worker failed, and the task goes on.

    The worker answered a ``ctx`` call with an error instead of a result.
    The handler may catch it and carry on; left uncaught, it fails the
    attempt (for good when ``kind`` is ``refused`` or ``unsupported``,
    since trying again cannot help; as retryable when it is ``failed``).

    Attributes:
        kind: ``refused`` (the spec does not allow the call: no ``[llm]``,
            an unknown tool, arguments that do not match the tool's
            schema), ``failed`` (the call could not be made) or
            ``unsupported`` (this worker does not answer calls).
        message: What went wrong, as the worker said it.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __repr__(self) -> str:
        return f"CallError({self.kind!r}, {self.message!r})"

    @property
    def retryable(self) -> bool:
        """Whether trying the attempt again may help (only for ``failed``)."""
        return self.kind == "failed"


class Fatal(Exception):
    """Raise it from a handler to fail the attempt for good (no retry).

    Any other exception fails the attempt as retryable::

        if card.expired:
            raise baton.Fatal("the card on file has expired")
    """


class StepError(Fatal):
    """A step's function returned a value that is not JSON.

    The journal keeps a step's value as JSON, so a step must return
    something ``json.dumps`` accepts (and no NaN or infinity). Running the
    attempt again would fail the same way, so this is fatal.
    """

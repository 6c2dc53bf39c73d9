"""Answers in A2A's terms, for sessions that came through ``baton a2a serve``.

Each helper builds an output map with an ``a2a`` entry; return it from a
handler (a dict completes the session) or pass it to
:func:`baton.complete`::

    return baton.a2a_message("Here is your answer")
    return baton.a2a_artifacts(baton.a2a_artifact("report", "all good"))
    return baton.a2a_reject("not a task for me")

Parts are A2A's JSON parts: ``{"text": ...}``, ``{"data": ...}``, or a file
``{"raw": BASE64 | "url": URL, "filename": ..., "mediaType": ...}``. Where a
part is expected, a ``str`` is a text part and a dict is taken as a part.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Union

__all__ = [
    "Part",
    "a2a_artifact",
    "a2a_artifacts",
    "a2a_data",
    "a2a_file",
    "a2a_message",
    "a2a_reject",
]

Part = Union[str, Mapping[str, Any]]
"""A part: a ``str`` (a text part) or an A2A part as a dict."""


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, str):
        return {"text": part}
    if isinstance(part, Mapping):
        return dict(part)
    raise TypeError(f"an A2A part is a str or a dict, not {type(part).__name__}")


def a2a_data(value: Any) -> dict[str, Any]:
    """A data part: ``{"data": value}`` (any JSON value)."""
    return {"data": value}


def a2a_file(
    content: bytes | None = None,
    *,
    url: str | None = None,
    filename: str | None = None,
    media_type: str | None = None,
) -> dict[str, Any]:
    """A file part: ``content`` (sent base64-encoded as ``raw``) or ``url``.

    Raises:
        ValueError: neither or both of ``content`` and ``url``.
    """
    if (content is None) == (url is None):
        raise ValueError("a2a_file needs exactly one of `content` and `url`")
    part: dict[str, Any] = (
        {"raw": base64.b64encode(content).decode("ascii")} if content is not None else {"url": url}
    )
    if filename is not None:
        part["filename"] = filename
    if media_type is not None:
        part["mediaType"] = media_type
    return part


def a2a_artifact(
    artifact_id: str,
    *parts: Part,
    append: bool = False,
    last_chunk: bool = False,
) -> dict[str, Any]:
    """One artifact (or one chunk of it, with ``append``/``last_chunk``).

    ``{"artifactId": artifact_id, "parts": [...]}``, plus ``"append": true``
    and ``"lastChunk": true`` when set. Chunks of one artifact share its id.
    """
    artifact: dict[str, Any] = {"artifactId": artifact_id, "parts": [_part(p) for p in parts]}
    if append:
        artifact["append"] = True
    if last_chunk:
        artifact["lastChunk"] = True
    return artifact


def a2a_artifacts(*artifacts: Mapping[str, Any] | str) -> dict[str, Any]:
    """An answer made of artifacts, streamed in order, one update each.

    Each artifact is a dict (see :func:`a2a_artifact`) or a ``str``, which
    becomes a text artifact with id ``artifact-N`` (N from 1).
    Output: ``{"a2a": {"artifacts": [...]}}``.
    """
    built: list[dict[str, Any]] = []
    for n, artifact in enumerate(artifacts, start=1):
        if isinstance(artifact, str):
            built.append(a2a_artifact(f"artifact-{n}", artifact))
        elif isinstance(artifact, Mapping):
            built.append(dict(artifact))
        else:
            raise TypeError(f"an A2A artifact is a dict or a str, not {type(artifact).__name__}")
    return {"a2a": {"artifacts": built}}


def a2a_message(*parts: Part) -> dict[str, Any]:
    """A direct answer (an A2A Message, not a Task) made of ``parts``.

    Output: ``{"a2a": {"message": [parts]}}``.
    """
    return {"a2a": {"message": [_part(p) for p in parts]}}


def a2a_reject(reason: str) -> dict[str, Any]:
    """Decline the A2A task (``TASK_STATE_REJECTED``) saying why.

    Output: ``{"a2a": {"reject": reason}}``.
    """
    return {"a2a": {"reject": reason}}

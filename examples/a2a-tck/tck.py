#!/usr/bin/env python3
"""The A2A TCK's scenarios as a Baton exec agent.

Reads the envelope on stdin; the A2A message's id is the variable
`a2a.message_id`. Prints one exec reply whose output, for the scenarios
that need more than a text answer, has an `a2a` entry (artifacts, a
direct message, or a rejection): see proto-schemas/PROTOCOL.md.
"""

import json
import os
import sys
import time


def artifact(artifact_id, *parts, **chunk):
    return {"artifactId": artifact_id, "parts": list(parts), **chunk}


TEXT = {"text": "Generated text content"}
FILE = {"raw": "dGNr", "filename": "output.txt", "mediaType": "text/plain"}
FILE_URL = {"url": "https://example.com/output.txt", "filename": "output.txt", "mediaType": "text/plain"}
DATA = {"data": {"key": "value", "count": 42}}

# Longest prefixes first: "tck-artifact-file-url" before "tck-artifact-file".
ARTIFACTS = [
    ("tck-stream-artifact-chunked", [
        artifact("chunked", {"text": "chunk-1 "}, append=True),
        artifact("chunked", {"text": "chunk-2"}, append=True, lastChunk=True),
    ]),
    ("tck-stream-artifact-text", [artifact("text", {"text": "Streamed text content"})]),
    ("tck-stream-artifact-file", [artifact("file", FILE)]),
    ("tck-stream-ordering-001", [artifact("text", {"text": "Ordered output"})]),
    ("tck-stream-001", [artifact("text", {"text": "Stream hello from TCK"})]),
    ("tck-stream-003", [artifact("text", {"text": "Stream task lifecycle"})]),
    ("tck-artifact-file-url", [artifact("file", FILE_URL)]),
    ("tck-artifact-text", [artifact("text", TEXT)]),
    ("tck-artifact-file", [artifact("file", FILE)]),
    ("tck-artifact-data", [artifact("data", DATA)]),
]


def reply(message_id, said):
    if message_id.startswith("baton-echo"):
        # Not a TCK scenario: what of the A2A message reached the agent.
        echoed = {key: said.get(key) for key in ("message_id", "metadata", "reference_task_ids", "files")}
        return {"action": "terminate",
                "output": {"a2a": {"artifacts": [artifact("echo", {"data": echoed})]}}}
    if message_id.startswith("tck-input-required"):
        # Asks the user: the task is input-required, and each answer runs
        # this program again (with the answer's messageId), to ask again
        # or complete.
        return {"ask": "The TCK asks for input."}
    if message_id.startswith("tck-reject-task"):
        return {"action": "terminate", "output": {"a2a": {"reject": "rejected"}}}
    if message_id.startswith("tck-message-response"):
        return {"action": "terminate",
                "output": {"a2a": {"message": [{"text": "Direct message response"}]}}}
    if message_id.startswith("test-resubscribe-message-id"):
        time.sleep(4)
        return {"action": "terminate", "output": "Hello from TCK"}
    for prefix, artifacts in ARTIFACTS:
        if message_id.startswith(prefix):
            return {"action": "terminate", "output": {"a2a": {"artifacts": artifacts}}}
    return {"action": "terminate", "output": "Hello from TCK"}


def main():
    envelope = json.load(sys.stdin)
    said = envelope.get("context", {}).get("variables", {}).get("a2a") or {}
    if os.environ.get("TCK_RUNS"):
        # Tests count the runs: one line per run, its messageId.
        with open(os.environ["TCK_RUNS"], "a") as runs:
            runs.write((said.get("message_id") or "") + "\n")
    print(json.dumps(reply(said.get("message_id") or "", said)))


if __name__ == "__main__":
    main()

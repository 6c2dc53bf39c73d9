#!/usr/bin/env python3
"""The MCP conformance suite's test tools as a Baton exec agent.

`baton mcp serve` offers each agent type as a tool named after it; each spec
of this folder is one of the suite's tools, and runs this program with the
tool's name. A tool with a `tool_schema` gets its call's arguments in the
variable `mcp.arguments`. The answer is an output with an `mcp` entry: the
tool result in MCP's terms (see docs/agents/kinds.md).
"""

import json
import os
import sys

# A 1x1 red PNG, and a WAV of one silent sample.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA=="


# The tools that ask the user, each with the answer it asks for.
ASKS = {
    "test_elicitation": {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    },
    "test_elicitation_sep1034_defaults": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    },
    "test_elicitation_sep1330_enums": {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {"type": "string", "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"}]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                           "enumNames": ["Option One", "Option Two", "Option Three"]},
            "untitledMulti": {"type": "array", "items": {
                "type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {"type": "array", "items": {"anyOf": [
                {"const": "value1", "title": "First Choice"},
                {"const": "value2", "title": "Second Choice"},
                {"const": "value3", "title": "Third Choice"}]}},
        },
    },
}


def text(said):
    return {"type": "text", "text": said}


def result(*content, error=False):
    answer = {"content": list(content)}
    if error:
        answer["isError"] = True
    return {"action": "terminate", "output": {"mcp": answer}}


def answer(tool, arguments, answered):
    if tool == "test_simple_text":
        return result(text("This is a simple text response for testing."))
    if tool == "test_image_content":
        return result({"type": "image", "data": PNG, "mimeType": "image/png"})
    if tool == "test_audio_content":
        return result({"type": "audio", "data": WAV, "mimeType": "audio/wav"})
    if tool == "test_embedded_resource":
        return result({"type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain",
            "text": "This is an embedded resource content."}})
    if tool == "test_multiple_content_types":
        return result(
            text("Multiple content types test:"),
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource", "resource": {
                "uri": "test://mixed-content-resource", "mimeType": "application/json",
                "text": json.dumps({"test": "data", "value": 123})}})
    if tool == "test_error_handling":
        return result(text("This tool intentionally returns an error for testing"), error=True)
    if tool in ASKS:
        if answered is None:
            message = arguments.get("message") or "Please answer the test's questions"
            return {"ask": message, "schema": ASKS[tool]}
        # The client's result: {"action": ..., "content": {...}}.
        said = json.loads(answered)
        action, content = said.get("action"), json.dumps(said.get("content"))
        if tool == "test_elicitation":
            return result(text(f"User response: action={action}, content={content}"))
        return result(text(f"Elicitation completed: action={action}, content={content}"))
    # test_tool_with_logging, test_tool_with_progress, json_schema_2020_12_tool:
    # the session's events are the log and progress notifications.
    return result(text(f"{tool} ran"))


def main():
    tool = sys.argv[1]
    if os.environ.get("CONFORMANCE_RUNS"):
        # Tests count the runs: one line per run, the tool's name.
        with open(os.environ["CONFORMANCE_RUNS"], "a") as runs:
            runs.write(tool + "\n")
    envelope = json.load(sys.stdin)
    context = envelope.get("context", {})
    arguments = (context.get("variables", {}).get("mcp") or {}).get("arguments") or {}
    # The answers to what this hop asked, in order.
    answers = (context.get("state") or {}).get("answers") or []
    answered = answers[-1].get("answer") if answers else None
    print(json.dumps(answer(tool, arguments, answered)))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The client under test when the MCP conformance suite checks Baton's MCP
client: `conformance client --command "python3 mcp_conformance_client.py"`.

The suite appends the server's URL and says the scenario and its context
(credentials) in MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT. This
writes an LLM agent's spec whose [[mcp]] is that server, signed in as the
context says, and reaches it as a worker does: `baton check --tools`
(BATON_BIN) connects, signs in and lists the tools.
"""

import json
import os
import subprocess
import sys
import tempfile


def spec(url, context):
    lines = [
        'name = "conformance_client"',
        'kind = "llm"',
        "[llm]",
        'base_url = "http://127.0.0.1:9/v1"',
        'model = "none"',
        "[[mcp]]",
        f"url = {json.dumps(url)}",
    ]
    env = {}
    if context.get("client_secret"):
        lines += [
            'auth = "client_credentials"',
            f"client_id = {json.dumps(context['client_id'])}",
            'client_secret_env = "CONFORMANCE_CLIENT_SECRET"',
        ]
        env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
    return "\n".join(lines) + "\n", env


def main():
    url = sys.argv[-1]
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    text, env = spec(url, context)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "client.toml")
        with open(path, "w") as file:
            file.write(text)
        ran = subprocess.run(
            [os.environ["BATON_BIN"], "check", "--tools", path],
            env={**os.environ, **env},
        )
    sys.exit(ran.returncode)


if __name__ == "__main__":
    main()

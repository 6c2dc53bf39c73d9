#!/usr/bin/env python3
"""The client under test when the MCP conformance suite checks Baton's MCP
client: `conformance client --command "python3 mcp_conformance_client.py"`.

The suite appends the server's URL and says the scenario and its context
(credentials) in MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT. This
writes an LLM agent's spec whose [[mcp]] is that server, signed in as the
scenario asks, and reaches it as a worker does: `baton check --tools`
(BATON_BIN) connects, signs in and lists the tools. A scenario of OAuth's
authorization code grant first runs `baton mcp login`, whose browser is
`curl` (the suite's authorization server redirects at once), and which keeps
the sign-in in the NATS server of NATS_URL, and then a real worker
(`baton worker --spec`) reaches the server with that sign-in. A scenario
that needs a call makes it with `baton mcp call`, as a worker would.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time


# The tool call a scenario checks, with its arguments.
CALLS = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}

# The client metadata document the suite expects a client to name.
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def login(url, context, env):
    """Signs in with `baton mcp login`, as the context's client if any."""
    args = [os.environ["BATON_BIN"], "mcp", "login", url, "--open-with", "curl -sL -o /dev/null",
            "--wait-secs", "20"]
    if context.get("client_id"):
        args += ["--client-id", context["client_id"]]
        if context.get("client_secret"):
            args += ["--client-secret-env", "CONFORMANCE_CLIENT_SECRET"]
    else:
        args += ["--client-metadata-url", CLIENT_METADATA_URL]
    ran = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    said = ran.stdout + ran.stderr
    sys.stderr.write(said)
    # The suite's tokens start so: none may be shown.
    if "test-token" in said:
        sys.stderr.write("a token was shown\n")
        return 3
    return ran.returncode


def worker(path, env):
    """Starts a worker of the spec until it says its MCP server is ready
    (it reached the server, signed in, and listed the tools); 0 then."""
    started = subprocess.Popen(
        [os.environ["BATON_BIN"], "worker", "--spec", path, "--no-registry",
         "--metrics-addr", "127.0.0.1:0"],
        env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    ready = 1
    try:
        for line in started.stderr:
            sys.stderr.write(line)
            if "test-token" in line:
                sys.stderr.write("a token was logged\n")
                return 3
            if "MCP server ready" in line:
                ready = 0
                break
            if time.monotonic() > deadline:
                break
    finally:
        started.terminate()
        started.wait(timeout=30)
    return ready


# A program that calls the server's tool once, through its worker (as a
# Python agent's `ctx.tool`), and answers with the tool's text.
CALLER = """
import baton

agent = baton.Agent()


@agent.task
async def call(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    result = await ctx.tool("test-tool", {})
    return baton.complete({"tool": result.text}, say=result.text)


agent.run()
"""

SDK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "python")


def baton_cli(*args, env=None, check=False):
    """Runs `baton ARGS`, its output echoed to stderr; fails on a token shown."""
    ran = subprocess.run([os.environ["BATON_BIN"], *args], env={**os.environ, **(env or {})},
                         capture_output=True, text=True, timeout=120)
    sys.stderr.write(ran.stdout + ran.stderr)
    if "test-token" in ran.stdout + ran.stderr:
        raise SystemExit("a token was shown")
    if check and ran.returncode != 0:
        raise SystemExit(f"baton {args[0]} {args[1] if len(args) > 1 else ''} failed")
    return ran


def step_up(url, folder, env):
    """A call the server refuses for its scope waits in the inbox; `baton
    inbox authorize` signs in again with more scopes, and the call is made:
    0 when the session completes with the tool's answer."""
    program = os.path.join(folder, "caller.py")
    with open(program, "w") as file:
        file.write(CALLER)
    path = os.path.join(folder, "caller.toml")
    with open(path, "w") as file:
        file.write("\n".join([
            'name = "conformance_caller"', 'kind = "exec"',
            "[exec]", f"command = [\"python3\", {json.dumps(program)}]", 'mode = "persistent"',
            "[[mcp]]", f"url = {json.dumps(url)}", 'auth = "oauth"',
        ]) + "\n")
    env = {**env, "PYTHONPATH": SDK}
    started = subprocess.Popen(
        [os.environ["BATON_BIN"], "worker", "--spec", path, "--no-registry",
         "--metrics-addr", "127.0.0.1:0"],
        env={**os.environ, **env}, stderr=subprocess.PIPE, text=True)
    leaked = []
    ready = threading.Event()

    def echo():
        for line in started.stderr:
            sys.stderr.write(line)
            if "test-token" in line:
                leaked.append(line)
            if "worker started" in line:
                ready.set()
    threading.Thread(target=echo, daemon=True).start()
    try:
        if not ready.wait(timeout=30):
            sys.stderr.write("the worker did not start\n")
            return 4
        sent = baton_cli("send", "--to", "conformance_caller", "--direct", "call the tool",
                         env=env, check=True)
        session = sent.stdout.split()[-1]
        entry = None
        deadline = time.monotonic() + 30
        while entry is None and time.monotonic() < deadline:
            listed = baton_cli("inbox", "ls", "--json", env=env, check=True)
            for line in listed.stdout.splitlines():
                waiting = json.loads(line)
                if waiting["session"] == session and waiting["reason"] == "authorization_required":
                    entry = waiting["id"]
            time.sleep(0.3)
        if entry is None:
            sys.stderr.write("no call waited for a sign-in\n")
            return 4
        baton_cli("inbox", "authorize", entry, "--open-with", "curl -sL -o /dev/null",
                  "--wait-secs", "20", env=env, check=True)
        watched = baton_cli("watch", session, "--json", env=env, check=True)
        ends = [json.loads(line) for line in watched.stdout.splitlines() if line.startswith("{")]
        done = any(event.get("type") == "completed" for event in ends)
        return 0 if done and not leaked else 5
    finally:
        started.terminate()
        started.wait(timeout=30)


def spec(url, scenario, context):
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
        env["CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
    if scenario.startswith("auth/client-credentials"):
        lines += [
            'auth = "client_credentials"',
            f"client_id = {json.dumps(context['client_id'])}",
        ]
        if context.get("private_key_pem"):
            # A JWT signed with the client's key, instead of a secret.
            env["CONFORMANCE_PRIVATE_KEY"] = context["private_key_pem"]
            lines += [
                'private_key_env = "CONFORMANCE_PRIVATE_KEY"',
                f"signing_algorithm = {json.dumps(context.get('signing_algorithm', 'RS256'))}",
            ]
        else:
            lines.append('client_secret_env = "CONFORMANCE_CLIENT_SECRET"')
    elif scenario == "elicitation-sep1034-client-defaults":
        lines.append('elicitation = "defaults"')
    elif scenario.startswith("auth/"):
        lines.append('auth = "oauth"')
        if context.get("client_id"):
            lines.append(f"client_id = {json.dumps(context['client_id'])}")
        if context.get("client_secret"):
            lines.append('client_secret_env = "CONFORMANCE_CLIENT_SECRET"')
    return "\n".join(lines) + "\n", env


def finish(scenario, code):
    """Exits with `code`, noted first in CONFORMANCE_CLIENT_LOG, if set, as
    `scenario code` (the suite checks what the servers saw, not this)."""
    if os.environ.get("CONFORMANCE_CLIENT_LOG"):
        with open(os.environ["CONFORMANCE_CLIENT_LOG"], "a") as log:
            log.write(f"{scenario} {code}\n")
    sys.exit(code)


def main():
    url = sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    text, env = spec(url, scenario, context)
    if scenario.startswith("auth/") and not scenario.startswith("auth/client-credentials"):
        signed = login(url, context, env)
        if signed != 0:
            finish(scenario, signed)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "client.toml")
        with open(path, "w") as file:
            file.write(text)
        if scenario == "auth/scope-step-up":
            finish(scenario, step_up(url, folder, env))
        if scenario.startswith("auth/") and not scenario.startswith("auth/client-credentials"):
            finish(scenario, worker(path, env))
        if scenario in CALLS:
            tool, arguments = CALLS[scenario]
            command = ["mcp", "call", path, tool, "--arguments", json.dumps(arguments)]
        else:
            command = ["check", "--tools", path]
        ran = subprocess.run([os.environ["BATON_BIN"], *command], env={**os.environ, **env})
    finish(scenario, ran.returncode)


if __name__ == "__main__":
    main()

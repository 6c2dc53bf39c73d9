#!/usr/bin/env python3
"""Rewrites the permission blocks of deploy/secured/nats-server.conf from
`baton permissions <role>`, after the roles' permissions changed.

    python3 deploy/secured/regenerate.py [path/to/baton]

A test (cluster::the_secured_deploy_config_holds_the_generated_blocks...)
fails while the file is out of date.
"""
import pathlib
import re
import subprocess
import sys

ROLES = {
    "router": ["router"],
    "registry": ["registry"],
    "client": ["client"],
    "operator": ["operator"],
    "refund": ["worker", "refund", "--to", "human_support"],
    "human_support": ["worker", "human_support", "--human", "--to", "refund"],
}
INDENT = " " * 8

baton = sys.argv[1] if len(sys.argv) > 1 else "target/debug/baton"
path = pathlib.Path(__file__).with_name("nats-server.conf")
lines = path.read_text().split("\n")
out, i, user = [], 0, None
while i < len(lines):
    line = lines[i]
    found = re.match(r"\s+user: (\w+)", line)
    if found:
        user = found.group(1)
    if user and (line.startswith(INDENT + "# baton ") or line == INDENT + "permissions {"):
        start = i
        while lines[start] != INDENT + "permissions {":
            start += 1
        end = start + 1
        while lines[end] != INDENT + "}":
            end += 1
        block = subprocess.run(
            [baton, "permissions", *ROLES[user]], capture_output=True, text=True, check=True
        ).stdout
        out += [INDENT + text if text else INDENT for text in block.rstrip("\n").split("\n")]
        i, user = end + 1, None
        continue
    out.append(line)
    i += 1
path.write_text("\n".join(out))

#!/usr/bin/env python3
"""The teams example as exec agents. Usage: team.py ROLE.

lead coordinates a team for each goal (see lead.toml's [team]): it assigns
the draft synchronously and the review and the research asynchronously,
pauses until those report, then concludes. researcher forms a sub-team of
its own with fact_checker. The envelope arrives on stdin; on a run after
assignments (BATON_RESUME=1) their results are in context.state.results,
and the whole group conversation is in context.messages.
"""
import json
import os
import sys
import time


def member(ctx, capability):
    """The agent type of the team member found for a capability."""
    for entry in ctx["variables"].get("team", []):
        if capability in entry.get("capabilities", []):
            return entry["agent"]
    return None


def lead(ctx):
    results = ctx.get("state", {}).get("results", [])
    if ctx["variables"].get("warmup"):
        # A first session with writer_a only: the notebook remembers it.
        if os.environ.get("BATON_RESUME") == "1":
            return {"action": "terminate", "output": "warmed up"}
        return {"action": "delegate", "children": [{"to": "writer_a", "input": "warm up"}]}
    if os.environ.get("BATON_RESUME") != "1":
        return {"action": "delegate", "say": "Let's split the work.", "children": [
            {"to": member(ctx, "draft"), "input": "draft the answer", "assignment": "sync"},
            {"to": member(ctx, "review"), "input": "review the plan", "assignment": "async"},
            {"to": "researcher", "input": "research the facts", "assignment": "async"},
        ]}
    if len(results) < 3:
        return {"action": "pause", "say": "The draft is in; waiting for the review and the research."}
    outputs = {r["agent"]: r["output"] for r in results}
    return {"action": "terminate", "say": "Concluding.", "output": outputs}


def researcher(ctx):
    if os.environ.get("BATON_RESUME") == "1":
        (checked,) = ctx["state"]["results"]
        return {"action": "terminate", "output": f"researched; {checked['output']}"}
    return {"action": "delegate", "children": [
        {"to": "fact_checker", "input": "check the facts", "assignment": "sync"},
    ]}


def writer(ctx):
    return {"output": f"draft by {sys.argv[1]}"}


def reviewer(ctx):
    time.sleep(3)
    return {"output": "review: looks right"}


def fact_checker(ctx):
    time.sleep(2)
    return {"output": "facts checked"}


ROLES = {"lead": lead, "researcher": researcher, "writer_a": writer, "writer_b": writer,
         "reviewer": reviewer, "fact_checker": fact_checker}

if __name__ == "__main__":
    envelope = json.load(sys.stdin)
    json.dump(ROLES[sys.argv[1]](envelope["context"]), sys.stdout)

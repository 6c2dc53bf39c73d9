#!/usr/bin/env python3
"""The team-up roles as Baton exec agents: an orchestrator delegates to a team
lead, which delegates to two developers in parallel. Usage: team.py ROLE.

The envelope arrives on stdin; on the second run (BATON_RESUME=1) the
children's results are in context.state.results.
"""
import json
import os
import sys


def results(ctx):
    return ctx.get("state", {}).get("results", [])


def orchestrator(ctx):
    if os.environ.get("BATON_RESUME") == "1":
        (lead,) = results(ctx)
        return {"action": "terminate", "say": "The team delivered.",
                "output": {"delivered": lead["status"] == "completed", "report": lead["output"]}}
    return {"action": "delegate", "mode": "parallel",
            "children": [{"to": "team_lead", "input": f"Build: {ctx['initial_query']}"}],
            "say": "Handing the project to the team lead."}


def team_lead(ctx):
    if os.environ.get("BATON_RESUME") == "1":
        parts = [r["output"] for r in results(ctx) if r["status"] == "completed"]
        return {"output": {"parts": parts, "failed": sum(r["status"] != "completed" for r in results(ctx))}}
    return {"action": "delegate", "mode": "parallel", "children": [
        {"to": "developer", "input": "the API"},
        {"to": "developer", "input": "the web page"},
    ]}


def developer(ctx):
    return {"output": f"done: {ctx['problem']}"}


ROLES = {"orchestrator": orchestrator, "team_lead": team_lead, "developer": developer}

if __name__ == "__main__":
    envelope = json.load(sys.stdin)
    json.dump(ROLES[sys.argv[1]](envelope["context"]), sys.stdout)

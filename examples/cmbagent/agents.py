#!/usr/bin/env python3
"""Deterministic stand-ins for the CMBAgent roles, as Baton exec agents.

Usage: agents.py ROLE. The envelope arrives as JSON on stdin; the reply (see
proto-schemas/schema/exec_reply.schema.json) goes to stdout. Only the standard
library is used.
"""
import json
import os
import sys


def improve(ctx, v):
    out = {"say": f"Task restated: {ctx['initial_query'].strip().rstrip('.')}, step by step."}
    if "feedback_left" not in v:
        out["variables"] = {"feedback_left": 2}
    return out


def plan(ctx, v):
    version = v.get("plan_version", 0) + 1
    steps = ["collect the data", "fit the model", "write the report"][: 1 + version]
    return {
        "say": f"Plan v{version}: " + "; ".join(steps),
        "variables": {"plan_version": version, "plan": steps},
        "trace": [{"action": "plan", "outcome": f"v{version}", "reasoning": "from the task and the last feedback"}],
    }


def review(ctx, v):
    left = v.get("feedback_left", 0)
    if left > 0:
        return {
            "say": f"Feedback on plan v{v.get('plan_version')}: add a step.",
            "variables": {"feedback_left": left - 1, "feedback_rounds": v.get("feedback_rounds", 0) + 1},
        }
    return {
        "say": f"Plan v{v.get('plan_version')} approved.",
        "variables": {"approved": True},
        "output": {"plan": v.get("plan"), "feedback_rounds": v.get("feedback_rounds", 0)},
    }


def control(ctx, v):
    steps = v.get("plan_steps", [])
    step = v.get("step", 0)
    if step < len(steps):
        return {
            "action": "handoff",
            "to": "engineer",
            "reason": "next_step",
            "suggested_next_action": f"implement: {steps[step]}",
            "variables": {"current_step": step, "n_attempts": v.get("n_attempts", 0)},
        }
    return {"action": "handoff", "to": "terminator", "reason": "plan_finished"}


def engineer(ctx, v):
    step = v.get("current_step", 0)
    attempt = v.get("n_attempts", 0) + 1
    return {"say": f"Code for step {step}, attempt {attempt}.", "state": {"code": f"step_{step}.py"}}


def execute(ctx, v):
    step = v.get("current_step", 0)
    if v.get("fail_step") == step:
        n = v.get("n_attempts", 0) + 1
        print(f"step {step} failed (attempt {n})", file=sys.stderr)
        return {"say": f"Execution of step {step} failed.", "variables": {"n_attempts": n, "last_execution": "failure"}}
    return {
        "say": f"Step {step} ran.",
        "variables": {"step": step + 1, "n_attempts": 0, "last_execution": "success"},
    }


def terminate(ctx, v):
    if v.get("n_attempts", 0) >= v.get("max_n_attempts", 1 << 30):
        status = "stopped: max attempts reached"
    else:
        status = "finished"
    return {"action": "terminate", "output": {"status": status, "steps_done": v.get("step", 0)}}


ROLES = {
    "task_improver": improve,
    "planner": plan,
    "plan_reviewer": review,
    "control": control,
    "engineer": engineer,
    "executor": execute,
    "terminator": terminate,
}

if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BATON_AGENT", "")
    if role not in ROLES:
        print(f"unknown role {role!r}; use one of {sorted(ROLES)}", file=sys.stderr)
        sys.exit(2)
    envelope = json.load(sys.stdin)
    context = envelope["context"]
    json.dump(ROLES[role](context, context.get("variables", {})), sys.stdout)

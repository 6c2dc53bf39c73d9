#!/usr/bin/env python3
"""Deterministic stand-ins for the CMBAgent roles, written with the Python
package (sdk/python, import name `baton`).

Usage: agents.py ROLE. Each role's spec runs it as a persistent exec program
(`mode = "persistent"`): one process per worker, many tasks. The package is
found through PYTHONPATH (the specs set it), after `pip install ./sdk/python`,
or, failing both, in this repository.
"""
import os
import sys

try:
    import baton
except ImportError:  # run from the repository without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
    import baton


def improve(task, v):
    query = task.context.get("initial_query", "")
    return baton.answer(
        None,
        say=f"Task restated: {query.strip().rstrip('.')}, step by step.",
        variables=None if "feedback_left" in v else {"feedback_left": 2},
    )


def plan(task, v):
    version = v.get("plan_version", 0) + 1
    steps = ["collect the data", "fit the model", "write the report"][: 1 + version]
    return baton.answer(
        None,
        say=f"Plan v{version}: " + "; ".join(steps),
        variables={"plan_version": version, "plan": steps},
        trace=[{"action": "plan", "outcome": f"v{version}", "reasoning": "from the task and the last feedback"}],
    )


def review(task, v):
    left = v.get("feedback_left", 0)
    if left > 0:
        return baton.answer(
            None,
            say=f"Feedback on plan v{v.get('plan_version')}: add a step.",
            variables={"feedback_left": left - 1, "feedback_rounds": v.get("feedback_rounds", 0) + 1},
        )
    return baton.answer(
        {"plan": v.get("plan"), "feedback_rounds": v.get("feedback_rounds", 0)},
        say=f"Plan v{v.get('plan_version')} approved.",
        variables={"approved": True},
    )


def control(task, v):
    steps = v.get("plan_steps", [])
    step = v.get("step", 0)
    if step < len(steps):
        return baton.handoff(
            to="engineer",
            reason="next_step",
            suggested_next_action=f"implement: {steps[step]}",
            variables={"current_step": step, "n_attempts": v.get("n_attempts", 0)},
        )
    return baton.handoff(to="terminator", reason="plan_finished")


def engineer(task, v):
    step = v.get("current_step", 0)
    attempt = v.get("n_attempts", 0) + 1
    return baton.answer(None, say=f"Code for step {step}, attempt {attempt}.", state={"code": f"step_{step}.py"})


def execute(task, v):
    step = v.get("current_step", 0)
    if v.get("fail_step") == step:
        n = v.get("n_attempts", 0) + 1
        # One process serves many sessions: the line names its own.
        print(f"step {step} failed (attempt {n}) in session {task.session}", file=sys.stderr)
        return baton.answer(
            None,
            say=f"Execution of step {step} failed.",
            variables={"n_attempts": n, "last_execution": "failure"},
        )
    return baton.answer(
        None,
        say=f"Step {step} ran.",
        variables={"step": step + 1, "n_attempts": 0, "last_execution": "success"},
    )


def terminate(task, v):
    if v.get("n_attempts", 0) >= v.get("max_n_attempts", 1 << 30):
        status = "stopped: max attempts reached"
    else:
        status = "finished"
    return baton.complete({"status": status, "steps_done": v.get("step", 0)})


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
    decide = ROLES[role]
    agent = baton.Agent()

    @agent.task
    async def handle(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
        return decide(task, task.variables)

    agent.run()

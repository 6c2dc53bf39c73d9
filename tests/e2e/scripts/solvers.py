#!/usr/bin/env python3
"""Exec agents for the learning tests. Usage: solvers.py ROLE.

front hands every task to an agent with capability `solve`; each solver
hands its answer to the checker; the checker sends solver_bad's answers to
a person (the fallback) and completes the rest. A solver fails a task that
asks it to crash.
"""
import json
import sys


def front(envelope):
    return {"action": "handoff", "requires": ["solve"]}


def solver(envelope):
    if "crash" in envelope["context"]["initial_query"]:
        return {"action": "fail", "error": "cannot solve this one", "retryable": False}
    return {"action": "handoff", "to": "checker", "say": f"answer by {sys.argv[1]}"}


def checker(envelope):
    solvers = [hop["agent"] for hop in envelope["path"] if hop["agent"].startswith("solver")]
    if solvers and solvers[-1] == "solver_bad":
        return {"action": "fallback", "reason": "user_escalation", "say": "this answer is wrong"}
    return {"action": "terminate", "output": "checked"}


if __name__ == "__main__":
    role = sys.argv[1]
    envelope = json.load(sys.stdin)
    reply = front(envelope) if role == "front" else checker(envelope) if role == "checker" else solver(envelope)
    json.dump(reply, sys.stdout)

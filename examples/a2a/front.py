#!/usr/bin/env python3
"""The front desk, a Baton exec agent: it hands a question to the `research`
agent type (a remote A2A agent), or, for "compare X and Y", asks it about
both in parallel and puts the answers together.
"""
import json
import os
import sys

envelope = json.load(sys.stdin)
context = envelope["context"]
question = context["initial_query"]
if os.environ.get("BATON_RESUME") == "1":
    results = context["state"]["results"]
    answers = [r["output"] for r in sorted(results, key=lambda r: r["index"]) if r["status"] == "completed"]
    reply = {"action": "terminate", "output": " | ".join(answers)}
elif question.lower().startswith("compare ") and " and " in question:
    topics = question[len("compare "):].split(" and ")
    reply = {"action": "delegate", "mode": "parallel",
             "children": [{"to": "research", "input": topic.strip()} for topic in topics],
             "say": "Asking the researcher about each."}
else:
    reply = {"action": "handoff", "to": "research", "reason": "knowledge_gap",
             "say": "Passing you to our researcher."}
json.dump(reply, sys.stdout)

"""The package as a real program: requests in on stdin, calls and answers out on stdout."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import AGENTS, SDK, Worker

OUTCOMES = {
    "str": {"action": "terminate", "output": "hello hi", "say": "hello hi"},
    "dict": {"action": "terminate", "output": {"k": "v"}},
    "complete": {
        "action": "terminate",
        "output": {"n": 1},
        "say": "done",
        "variables": {"a": 1},
        "state": {"b": 2},
        "hand_back": True,
    },
    "answer": {"output": "for the rules", "say": "for the rules"},
    "handoff_to": {
        "action": "handoff",
        "to": "billing",
        "reason": "out_of_scope",
        "suggested_next_action": "refund it",
    },
    "handoff_requires": {
        "action": "handoff",
        "requires": ["refunds"],
        "domains": ["eu"],
        "min_tier": 2,
    },
    "escalate": {"action": "escalate", "requires": ["human"], "reason": "user_escalation"},
    "fallback": {"action": "fallback", "reason": "complexity_exceeded"},
    "reject": {"action": "reject", "error": "not mine"},
    "fail": {"action": "fail", "error": "database down", "retryable": True},
    "a2a": {
        "action": "terminate",
        "output": {"a2a": {"message": [{"text": "hi"}, {"data": {"n": 1}}]}},
    },
    "raise": {"action": "fail", "error": "ValueError: boom", "retryable": True},
    "fatal": {"action": "fail", "error": "Fatal: card expired", "retryable": False},
    "none": {
        "action": "fail",
        "error": "a handler returns a str, a dict, or one of "
        "baton.complete/handoff/escalate/reject/fail; it returned None",
        "retryable": False,
    },
    "int": {
        "action": "fail",
        "error": "a handler returns a str, a dict, or one of "
        "baton.complete/handoff/escalate/reject/fail; it returned int",
        "retryable": False,
    },
    "not_json": {
        "action": "fail",
        "error": "the handler's answer is not JSON: Object of type date is not JSON serializable",
        "retryable": False,
    },
}


def test_every_outcome_is_its_exact_reply(worker: Worker) -> None:
    for n, case in enumerate(OUTCOMES):
        worker.request(str(n), case)
        assert worker.answer(str(n)) == OUTCOMES[case], case
    assert worker.close() == 0


def test_plain_handlers_work_without_calls(worker: Worker) -> None:
    worker.request("1", "str", calls=False)
    assert worker.answer("1") == {"action": "terminate", "output": "hello hi", "say": "hello hi"}
    worker.request("2", "no_calls", calls=False)
    assert worker.answer("2") == {
        "action": "terminate",
        "output": {"kind": "unsupported", "message": "this worker does not answer calls: upgrade baton"},
    }


def test_task_fields(worker: Worker) -> None:
    env = {
        "v": 1,
        "id": "e1",
        "session": "s1",
        "kind": "task",
        "conversation": {"id": "conv-9", "turn": 3},
        "versions": {"kitchen": "v7", "other": "v1"},
        "context": {
            "initial_query": "first",
            "messages": [
                {"role": "user", "content": "first", "at": 1},
                {"role": "agent", "content": "Which?", "name": "kitchen", "at": 2},
                {"role": "user", "content": "latest", "at": 3},
            ],
            "variables": {"case": "fields"},
            "state": {"answers": []},
        },
    }
    worker.send({"id": "7", "envelope": env, "attempt": 2, "resume": True, "calls": True})
    assert worker.answer("7")["output"] == {
        "id": "7",
        "text": "latest",
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "Which?", "name": "kitchen"},
            {"role": "user", "content": "latest"},
        ],
        "variables": {"case": "fields"},
        "state": {"answers": []},
        "session": "s1",
        "conversation": "conv-9",
        "attempt": 2,
        "resume": True,
        "version": "v7",
    }
    # The worker's own `messages` win over the mapping.
    given = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "from the worker"}]
    worker.send({"id": "8", "envelope": env, "attempt": 1, "calls": True, "messages": given})
    output = worker.answer("8")["output"]
    assert output["messages"] == given
    assert output["text"] == "from the worker"
    assert output["resume"] is False


def test_step_runs_then_is_journaled(worker: Worker) -> None:
    worker.request("1", "step")
    step = worker.call()
    assert step == {"call": step["call"], "task": "1", "op": "step", "name": "charge", "idempotent": False}
    worker.result(step, {"run": True, "key": "sess:1001"})
    done = worker.call()
    assert done == {
        "call": done["call"],
        "task": "1",
        "op": "step_done",
        "name": "charge",
        "key": "sess:1001",
        "value": {"charged": 10, "key": "sess:1001"},
    }
    assert done["call"] != step["call"]
    worker.result(done, {})
    second = worker.call()
    assert second["name"] == "tuple"
    worker.result(second, {"run": True, "key": "sess:1002"})
    done2 = worker.call()
    assert done2["value"] == [1, 2]
    worker.result(done2, {})
    assert worker.answer("1") == {
        "action": "terminate",
        "output": {"value": {"charged": 10, "key": "sess:1001"}, "again": [1, 2]},
    }
    worker.close()
    assert "charging 10\n" in worker.stderr  # the step's print went to the log


def test_recorded_step_is_not_run_again(worker: Worker) -> None:
    worker.request("1", "step")
    step = worker.call()
    worker.result(step, {"recorded": True, "value": {"charged": 10, "key": "old"}})
    second = worker.call()
    assert second["op"] == "step" and second["name"] == "tuple"
    worker.result(second, {"recorded": True, "value": [1, 2]})
    assert worker.answer("1") == {
        "action": "terminate",
        "output": {"value": {"charged": 10, "key": "old"}, "again": [1, 2]},
    }
    worker.close()
    assert not any("charging" in line for line in worker.stderr)


def test_async_idempotent_step(worker: Worker) -> None:
    worker.request("1", "step_async")
    step = worker.call()
    assert step["idempotent"] is True
    worker.result(step, {"run": True, "key": "k-9"})
    done = worker.call()
    assert done["value"] == "fetched k-9"
    worker.result(done, {})
    assert worker.answer("1") == {"action": "terminate", "output": "fetched k-9", "say": "fetched k-9"}


def test_key_is_per_step_under_gather(worker: Worker) -> None:
    worker.request("1", "gather_steps")
    steps = [worker.call() for _ in range(3)]
    assert sorted(s["name"] for s in steps) == ["a", "b", "c"]
    for s in reversed(steps):
        worker.result(s, {"run": True, "key": "key-" + s["name"]})
    dones = [worker.call() for _ in range(3)]
    for d in dones:
        assert d["op"] == "step_done"
        assert d["value"] == ["key-" + d["name"]] * 2, d
        worker.result(d, {})
    reply = worker.answer("1")
    assert reply["output"]["results"] == [["key-a", "key-a"], ["key-b", "key-b"], ["key-c", "key-c"]]
    assert reply["output"]["outside"].startswith("ctx.key is only known while a step runs")


def test_a_step_that_is_not_json_names_the_step(worker: Worker) -> None:
    worker.request("1", "step_not_json")
    worker.result(worker.call(), {"run": True, "key": "k"})
    done = worker.call()
    message = "step 'charge' returned a datetime, which is not JSON"
    assert done == {"call": done["call"], "task": "1", "op": "step_done", "name": "charge", "key": "k", "error": message}
    worker.result(done, {})
    assert worker.answer("1") == {"action": "fail", "error": "StepError: " + message, "retryable": False}


def test_a_step_that_raises_tells_the_worker_then_fails(worker: Worker) -> None:
    worker.request("1", "step_raises")
    worker.result(worker.call(), {"run": True, "key": "k"})
    done = worker.call()
    assert done == {
        "call": done["call"], "task": "1", "op": "step_done", "name": "charge", "key": "k", "error": "card declined"
    }
    worker.result(done, {})
    assert worker.answer("1") == {"action": "fail", "error": "RuntimeError: card declined", "retryable": True}


def test_end_cancels_the_handler_and_sends_no_answer(worker: Worker) -> None:
    worker.request("1", "ask_ignores_cancel")
    worker.request("2", "ask")
    asks = {c["task"]: c for c in (worker.call(), worker.call())}
    assert asks["1"] == {"call": asks["1"]["call"], "task": "1", "op": "ask", "question": "Which order?"}
    worker.send({"call": asks["1"]["call"], "end": "waiting"})
    worker.nothing()  # no answer, no call, even though the handler ignored the cancellation
    worker.result(asks["2"], {"answer": "ABC-123"})
    assert worker.answer("2") == {"action": "terminate", "output": "answer: ABC-123", "say": "answer: ABC-123"}
    worker.request("3", "ask")
    ask = worker.call()
    worker.send({"call": ask["call"], "end": "failed", "message": "step 1 is 'a' in the record, 'b' now"})
    worker.nothing()
    worker.request("4", "str")
    assert worker.answer("4") == {"action": "terminate", "output": "hello hi", "say": "hello hi"}
    worker.close()
    assert any("step 1 is 'a' in the record, 'b' now" in line for line in worker.stderr)


def test_stray_output_goes_to_stderr(worker: Worker) -> None:
    worker.request("1", "print")
    assert worker.answer("1") == {"action": "terminate", "output": "clean", "say": "clean"}
    assert worker.close() == 0
    for raw in worker.raw:
        json.loads(raw)
    log = "".join(worker.stderr)
    for stray in ("stray print", "stray write", "stray fd write", "from a child process"):
        assert stray in log


def test_a_10_mb_request(worker: Worker) -> None:
    text = "x" * (10 * 1024 * 1024 - 5) + "tail!"
    worker.request("1", "big", text=text)
    assert worker.answer("1", timeout=30) == {
        "action": "terminate",
        "output": {"length": 10 * 1024 * 1024, "tail": "tail!"},
    }


def test_1000_concurrent_requests(worker: Worker) -> None:
    start = time.monotonic()
    for n in range(1000):
        worker.request(str(n), "sleep")
    answers = {}
    for _ in range(1000):
        line = worker.recv()
        answers[line["id"]] = line["reply"]
    assert answers == {str(n): {"action": "terminate", "output": str(n), "say": str(n)} for n in range(1000)}
    # 0.2 s each: they ran at once, not one after the other
    assert time.monotonic() - start < 15


def test_calls_are_matched_by_id_out_of_order(worker: Worker) -> None:
    worker.request("1", "parallel_calls")
    calls = {c["name"]: c for c in (worker.call(), worker.call())}
    assert calls["a"] == {"call": calls["a"]["call"], "task": "1", "op": "tool", "name": "a", "arguments": {"n": 1}}
    assert calls["b"] == {"call": calls["b"]["call"], "task": "1", "op": "tool", "name": "b", "arguments": {}}
    assert calls["a"]["call"] != calls["b"]["call"]
    worker.result(calls["b"], {"text": "from b", "is_error": True})
    worker.result(calls["a"], {"text": "from a", "is_error": False})
    assert worker.answer("1") == {"action": "terminate", "output": {"texts": ["from a", False, "from b", True]}}


def test_call_errors_surface(worker: Worker) -> None:
    worker.request("1", "call_error")
    call = worker.call()
    worker.send({"call": call["call"], "error": {"kind": "refused", "message": "unknown tool 'nope'"}})
    assert worker.answer("1") == {
        "action": "terminate",
        "output": {"kind": "refused", "message": "unknown tool 'nope'"},
    }
    worker.request("2", "call_error_uncaught")
    call = worker.call()
    assert call == {
        "call": call["call"],
        "task": "2",
        "op": "model",
        "messages": [{"role": "user", "content": "hi"}],
    }
    worker.send({"call": call["call"], "error": {"kind": "refused", "message": "the spec has no [llm]"}})
    assert worker.answer("2") == {"action": "fail", "error": "CallError: the spec has no [llm]", "retryable": False}
    worker.request("3", "call_error_uncaught")
    call = worker.call()
    worker.send({"call": call["call"], "error": {"kind": "failed", "message": "endpoint down"}})
    assert worker.answer("3") == {"action": "fail", "error": "CallError: endpoint down", "retryable": True}


def test_tools_and_model_reply_parsing(worker: Worker) -> None:
    worker.request("1", "tools_model", text="where is ABC-123?")
    tools_call = worker.call()
    assert tools_call == {"call": tools_call["call"], "task": "1", "op": "tools"}
    tools = [
        {
            "type": "function",
            "function": {"name": "orders__lookup", "description": "Look up", "parameters": {"type": "object"}},
        }
    ]
    worker.result(tools_call, {"tools": tools})
    model = worker.call()
    assert model == {
        "call": model["call"],
        "task": "1",
        "op": "model",
        "messages": [{"role": "user", "content": "where is ABC-123?"}],
        "tools": tools,
        "params": {"temperature": 0},
    }
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "orders__lookup", "arguments": '{"order": "ABC-123"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "orders__lookup", "arguments": "{not json"}},
        ],
    }
    usage = {"prompt_tokens": 12, "completion_tokens": 7}
    worker.result(model, {"message": message, "usage": usage, "finish_reason": "tool_calls"})
    assert worker.answer("1")["output"] == {
        "tools": tools,
        "text": "",
        "calls": [
            ["call_1", "orders__lookup", {"order": "ABC-123"}, '{"order": "ABC-123"}'],
            ["call_2", "orders__lookup", {}, "{not json"],
        ],
        "finish": "tool_calls",
        "usage": usage,
        "message": message,
    }


def test_ask_delegate_say(worker: Worker) -> None:
    worker.request("1", "delegate")
    call = worker.call()
    assert call == {
        "call": call["call"],
        "task": "1",
        "op": "delegate",
        "children": [{"to": "researcher", "input": "find it"}, {"requires": ["maths"], "input": "add"}],
        "mode": "serial",
    }
    results = [
        {"index": 0, "agent": "researcher", "tag": None, "status": "completed", "output": "found", "detail": None},
        {"index": 1, "agent": "calc", "tag": None, "status": "failed", "output": None, "detail": "no"},
    ]
    worker.result(call, {"results": results})
    assert worker.answer("1") == {"action": "terminate", "output": {"results": results}}
    worker.request("2", "say")
    call = worker.call()
    assert call == {"call": call["call"], "task": "2", "op": "say", "text": "working on it"}
    worker.result(call, {})
    assert worker.answer("2") == {"action": "terminate", "output": "said", "say": "said"}


def test_a_call_for_an_unknown_id_is_ignored(worker: Worker) -> None:
    worker.send({"call": "c999", "result": {}})
    worker.send({"neither": True})
    worker.request("1", "str")
    assert worker.answer("1") == {"action": "terminate", "output": "hello hi", "say": "hello hi"}


def test_stdin_closing_finishes_the_tasks_in_flight(worker: Worker) -> None:
    worker.request("1", "sleep")
    worker.request("2", "ask")
    call = worker.call()
    assert worker.close() == 0
    lines = [worker.recv(), worker.recv()]
    assert {"id": "1", "reply": {"action": "terminate", "output": "1", "say": "1"}} in lines
    assert {
        "id": "2",
        "reply": {"action": "fail", "error": "CallError: the worker closed the program's stdin", "retryable": True},
    } in lines
    assert call["op"] == "ask"


def _start(script: str, mode: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(SDK), "PATH": "/usr/bin:/bin"}
    if mode is not None:
        env["BATON_EXEC_MODE"] = mode
    return subprocess.run(
        [sys.executable, str(AGENTS / script)],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


@pytest.mark.parametrize("mode", [None, "per_task"])
def test_run_outside_persistent_mode_exits_2(mode: str | None) -> None:
    done = _start("kitchen.py", mode)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert 'set mode = "persistent" under [exec]' in lines[0]


def test_run_without_a_handler_exits_2() -> None:
    done = _start("empty.py", "persistent")
    assert done.returncode == 2
    assert done.stderr == (
        "baton: no handler: decorate an `async def handler(task, ctx)` with @agent.task "
        "before agent.run()\n"
    )

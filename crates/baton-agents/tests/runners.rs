//! The exec and LLM runners against real programs and a scripted
//! chat-completions server.

use std::path::Path;
use std::time::Duration;

use baton_agents::{ExecRunner, LlmRunner};
use baton_proto::{AgentName, Envelope, Message, Reason, Role, Value};
use baton_testkit::{FakeLlm, Scripted};
use baton_worker::{
    AgentError, Answer, Handoff, LlmCondition, Outcome, Route, Routing, Target, Task,
};

fn name(agent: &str) -> AgentName {
    AgentName::new(agent).unwrap()
}

fn task(text: &str) -> Task {
    Task {
        envelope: Envelope::task(text).into(),
        attempt: 1,
        agent: AgentName::new("tester").unwrap(),
        instance: "t1".into(),
        progress: baton_worker::Progress::default(),
        registry: None,
    }
}

fn exec(dir: &Path, script: &str) -> ExecRunner {
    std::fs::write(dir.join("agent.py"), script).unwrap();
    let spec: baton_agents::spec::ExecSpec =
        toml::from_str(r#"command = ["python3", "agent.py"]"#).unwrap();
    ExecRunner::new(&spec, dir)
}

#[tokio::test]
async fn an_exec_agent_reads_the_envelope_and_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let runner = exec(
        dir.path(),
        r#"
import json, os, sys
envelope = json.load(sys.stdin)
json.dump({"output": envelope["context"]["initial_query"].upper(),
           "variables": {"attempt": int(os.environ["BATON_ATTEMPT"]),
                         "session": os.environ["BATON_SESSION"],
                         "agent": os.environ["BATON_AGENT"]}}, sys.stdout)
"#,
    );
    let task = task("hello");
    let Outcome::Answer(Answer { output, update, .. }) = runner.run(&task).await.unwrap() else {
        panic!("not an answer")
    };
    assert_eq!(output, Value::from("HELLO"));
    assert_eq!(update.variables["attempt"], Value::from(1));
    assert_eq!(update.variables["agent"], Value::from("tester"));
    assert_eq!(
        update.variables["session"],
        Value::from(task.envelope.session.to_string())
    );
}

#[tokio::test]
async fn exit_codes_say_retry_or_give_up_and_bad_replies_are_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let retry = exec(
        dir.path(),
        "import sys\nprint('database busy', file=sys.stderr)\nsys.exit(75)\n",
    );
    match retry.run(&task("x")).await {
        Err(AgentError::Retryable(detail)) => {
            assert!(detail.contains("exited with 75 (retry)"), "{detail}");
            assert!(detail.contains("stderr: database busy"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let fatal = exec(dir.path(), "import sys\nsys.exit(3)\n");
    assert!(
        matches!(fatal.run(&task("x")).await, Err(AgentError::Fatal(d)) if d.contains("exited with 3"))
    );
    let garbage = exec(dir.path(), "print('not json')\n");
    assert!(matches!(
        garbage.run(&task("x")).await,
        Err(AgentError::Fatal(d)) if d.contains("did not print an outcome object") && d.contains("exec_reply.schema.json")
    ));
    let missing: baton_agents::spec::ExecSpec =
        toml::from_str(r#"command = ["./no-such-program"]"#).unwrap();
    assert!(matches!(
        ExecRunner::new(&missing, dir.path()).run(&task("x")).await,
        Err(AgentError::Fatal(d)) if d.contains("cannot start") && d.contains("check [exec] command")
    ));
}

#[tokio::test]
async fn a_timeout_kills_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let runner = exec(
        dir.path(),
        "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(60)\n",
    );
    let task = task("slow");
    let result = tokio::time::timeout(Duration::from_millis(1500), runner.run(&task)).await;
    assert!(result.is_err(), "the run should have timed out");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let proc_dir = Path::new("/proc").join(pid.trim());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proc_dir.exists() {
        // A killed child is a zombie until reaped; either way it no longer runs.
        let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
        if status.contains("State:\tZ") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn routing() -> Routing {
    Routing {
        handoffs: vec![Route {
            description: Some("Refunds.".into()),
            ..Route::to(name("refund"))
        }],
        llm_conditions: vec![LlmCondition {
            condition: "The customer asks for a person.".into(),
            route: Route::to(name("human")),
        }],
        ..Routing::default()
    }
}

fn llm(url: &str) -> LlmRunner {
    let spec: baton_agents::spec::LlmSpec = toml::from_str(&format!(
        "base_url = \"{url}\"\nmodel = \"m\"\nsystem_prompt = \"Be brief.\"\nrequest_timeout_ms = 5000\n"
    ))
    .unwrap();
    LlmRunner::new(&spec, &routing(), &[]).unwrap()
}

#[tokio::test]
async fn a_plain_answer_is_left_to_the_rules_and_the_conversation_is_sent() {
    let server = FakeLlm::start(vec![Scripted::text("We are open 9-17.")]).unwrap();
    let mut task = task("When are you open?");
    task.envelope
        .context
        .messages
        .push(Message::new(Role::Agent, "Let me check.").with_name("triage"));
    let Outcome::Answer(Answer {
        output,
        update,
        judged: None,
    }) = llm(server.url()).run(&task).await.unwrap()
    else {
        panic!("not an answer")
    };
    assert_eq!(output, Value::from("We are open 9-17."));
    assert_eq!(update.messages[0].content, "We are open 9-17.");
    let body = &server.requests()[0].body;
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "When are you open?"},
            {"role": "assistant", "content": "Let me check.", "name": "triage"},
        ])
    );
    assert_eq!(server.requests()[0].authorization, None);
}

#[tokio::test]
async fn tool_calls_are_handoffs_or_judged_conditions_and_are_recorded() {
    let server = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer_to_refund", "{}")]),
        Scripted::tool_calls(&[("transfer_to_human", r#"{"reason": "user_escalation"}"#)]),
    ])
    .unwrap();
    let runner = llm(server.url());
    let Outcome::Handoff(Handoff {
        target,
        reason,
        update,
        ..
    }) = runner.run(&task("refund?")).await.unwrap()
    else {
        panic!("not a handoff")
    };
    assert_eq!(target, Target::Agent(name("refund")));
    assert_eq!(reason, Reason::LlmHandoff);
    assert_eq!(update.messages.len(), 2);
    assert!(update.messages[0].tool_calls.is_some());
    assert_eq!(update.messages[1].role, Role::Tool);
    assert_eq!(update.messages[1].tool_call_id.as_deref(), Some("call_0"));

    // A condition's tool is a judgement the runtime's rules route (index 0: to human).
    let outcome = runner.run(&task("a person please")).await.unwrap();
    assert!(
        matches!(
            outcome,
            Outcome::Answer(Answer {
                judged: Some(0),
                ..
            })
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn an_invalid_tool_call_is_reported_back_once_then_fails() {
    let server = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer_to_nobody", "{}")]),
        Scripted::tool_calls(&[("transfer_to_refund", "{}")]),
    ])
    .unwrap();
    let outcome = llm(server.url()).run(&task("x")).await.unwrap();
    assert!(matches!(outcome, Outcome::Handoff(_)));
    let second = &server.requests()[1].body["messages"];
    let tool_reply = &second[second.as_array().unwrap().len() - 1];
    assert_eq!(tool_reply["role"], "tool");
    let text = tool_reply["content"].as_str().unwrap();
    assert!(
        text.contains("there is no tool \"transfer_to_nobody\""),
        "{text}"
    );
    assert!(text.contains("transfer_to_refund"), "{text}");

    let server = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer_to_nobody", "{}")]),
        Scripted::tool_calls(&[("transfer_to_refund", "not json")]),
    ])
    .unwrap();
    let error = llm(server.url()).run(&task("x")).await.unwrap_err();
    assert!(
        matches!(&error, AgentError::Fatal(d) if d.contains("invalid tool call twice")),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn http_failures_are_retried_honouring_retry_after_or_fatal() {
    let server = FakeLlm::start(vec![
        Scripted::error(429, &[("Retry-After", "7")]),
        Scripted::error(503, &[]),
        Scripted::error(401, &[]),
    ])
    .unwrap();
    let runner = llm(server.url());
    assert!(matches!(
        runner.run(&task("x")).await,
        Err(AgentError::RetryAfter(_, after)) if after == Duration::from_secs(7)
    ));
    assert!(
        matches!(runner.run(&task("x")).await, Err(AgentError::Retryable(d)) if d.contains("503"))
    );
    assert!(matches!(
        runner.run(&task("x")).await,
        Err(AgentError::Fatal(d)) if d.contains("401") && d.contains("api_key_env")
    ));
    // Nothing listening: retryable.
    let gone = llm("http://127.0.0.1:9/v1");
    assert!(matches!(
        gone.run(&task("x")).await,
        Err(AgentError::Retryable(_))
    ));
}

#[test]
fn an_unset_api_key_variable_is_a_clear_error() {
    let spec: baton_agents::spec::LlmSpec =
        toml::from_str("model = \"m\"\napi_key_env = \"BATON_SURELY_UNSET_KEY\"\n").unwrap();
    let err = LlmRunner::new(&spec, &Routing::default(), &[]).unwrap_err();
    assert!(
        err.to_string().contains("export BATON_SURELY_UNSET_KEY="),
        "{err}"
    );
}

/// An LLM runner whose history is bounded to `most` messages.
fn bounded(url: &str, most: u32) -> LlmRunner {
    let spec: baton_agents::spec::LlmSpec = toml::from_str(&format!(
        "base_url = \"{url}\"\nmodel = \"m\"\nrequest_timeout_ms = 5000\n[history]\nmax_messages = {most}\n"
    ))
    .unwrap();
    LlmRunner::new(&spec, &Routing::default(), &[]).unwrap()
}

/// A task whose conversation has three exchanges.
fn three_exchanges() -> Task {
    let mut task = task("first");
    let messages = &mut task.envelope.context.messages;
    messages.push(Message::new(Role::Agent, "one").with_name("tester"));
    messages.push(Message::new(Role::User, "second"));
    messages.push(Message::new(Role::Agent, "two").with_name("tester"));
    messages.push(Message::new(Role::User, "third"));
    task
}

#[tokio::test]
async fn past_its_bound_the_conversation_gives_way_to_a_summary_the_model_reads() {
    let server = FakeLlm::start(vec![
        Scripted::text("They asked twice."),
        Scripted::text("Third answered."),
    ])
    .unwrap();
    let outcome = bounded(server.url(), 4)
        .run(&three_exchanges())
        .await
        .unwrap();
    let asked = server.requests();
    assert_eq!(asked.len(), 2);
    // The summary call: no tools, the older exchanges as text.
    assert!(asked[0].body.get("tools").is_none(), "{}", asked[0].body);
    let older = asked[0].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        older.contains("user: first") && older.contains("user: second"),
        "{older}"
    );
    assert!(!older.contains("third"), "{older}");
    // The answer's request: the summary, then the newest exchange whole.
    assert_eq!(
        asked[1].body["messages"],
        serde_json::json!([
            {"role": "system", "content": "Summary of the conversation before the messages below:\nThey asked twice."},
            {"role": "user", "content": "third"},
        ])
    );
    let Outcome::Answer(Answer { update, .. }) = outcome else {
        panic!("not an answer")
    };
    let compacted = update.compaction.expect("a compaction");
    assert_eq!(compacted.replaces, 4);
    assert_eq!(compacted.message.content, "They asked twice.");
    let compaction = compacted.message.compaction.expect("what it stands for");
    assert_eq!(
        (compaction.through, compaction.model.as_deref()),
        (4, Some("m"))
    );
}

#[tokio::test]
async fn a_summary_with_no_text_fails_the_hop_instead_of_dropping_the_messages() {
    let server = FakeLlm::start(vec![Scripted::text(""), Scripted::text("unused")]).unwrap();
    let result = bounded(server.url(), 4).run(&three_exchanges()).await;
    let Err(AgentError::Fatal(detail)) = result else {
        panic!("not a fatal error: {result:?}")
    };
    assert!(detail.contains("answered no text"), "{detail}");
    assert_eq!(
        server.requests().len(),
        1,
        "the agent's own call was not made"
    );
}

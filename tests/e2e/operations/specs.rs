//! Agents from spec files: the CMBAgent loops with exec agents, an LLM agent
//! against a scripted endpoint, a person answering through the inbox, and
//! `baton check`.

use std::time::Duration;

use baton_proto::{Envelope, Event, EventType, Value};
use baton_testkit::{FakeLlm, Scripted};
use futures::StreamExt;
use uuid::Uuid;

use crate::util::{System, agents, example, field, kinds, wants};

impl System {
    /// Events of `session` until one of type `kind` (inclusive).
    async fn events_until(
        &self,
        session: Uuid,
        kind: EventType,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Event>> {
        let mut stream = self.client.events(session).await?;
        let mut events = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
            let event = event?;
            let done = event.kind == kind;
            events.push(event);
            if done {
                return Ok(events);
            }
        }
        anyhow::bail!(
            "no {kind} event within {timeout:?}; got {:?}",
            kinds(&events)
        )
    }
}

fn with_vars(text: &str, vars: &[(&str, Value)]) -> Envelope {
    let mut task = Envelope::task(text);
    for (key, value) in vars {
        task = task.with_variable(*key, value.clone());
    }
    task
}

async fn planning_loop() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    for agent in ["task_improver", "planner", "plan_reviewer", "human"] {
        system
            .spec_worker(agent, &example(&format!("cmbagent/{agent}.toml")), &[])
            .await?;
    }
    Ok(system)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_planning_loop_ends_after_exactly_its_feedback_budget() -> anyhow::Result<()> {
    let system = planning_loop().await?;
    let events = system
        .run(
            "task_improver",
            &Envelope::task("Fit a model to the CMB power spectrum."),
        )
        .await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(
        agents(&done.path),
        [
            "task_improver",
            "planner",
            "plan_reviewer",
            "planner",
            "plan_reviewer",
            "planner",
            "plan_reviewer"
        ]
    );
    let output = done.output.as_ref().unwrap();
    assert_eq!(field(output, "feedback_rounds"), Some(&Value::from(2)));
    let plan = field(output, "plan").and_then(Value::as_array).unwrap();
    assert_eq!(plan.len(), 3, "the third draft has three steps: {plan:?}");
    // The reviewer's route back to the planner is a context condition's
    // sibling: after-work; approval is the condition.
    assert_eq!(
        done.path[1..]
            .iter()
            .map(|hop| hop
                .reason
                .as_ref()
                .map(|r| r.as_str().to_owned())
                .unwrap_or_default())
            .collect::<Vec<_>>(),
        ["after_work"; 6]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_past_its_visit_budget_is_caught_by_the_loop_guard() -> anyhow::Result<()> {
    let system = planning_loop().await?;
    // Five rounds of feedback asked for, but the routes allow three visits.
    let task = with_vars("Fit a model.", &[("feedback_left", Value::from(5))]);
    system
        .client
        .submit_to(&baton_proto::AgentName::new("task_improver")?, &task)
        .await?;
    let events = system
        .events_until(task.session, EventType::Waiting, Duration::from_secs(60))
        .await?;
    let detected = events
        .iter()
        .find(|e| e.kind == EventType::LoopDetected)
        .expect("loop_detected");
    assert_eq!(detected.agent.as_deref(), Some("plan_reviewer"));
    assert_eq!(detected.to.as_deref(), Some("planner"));
    let detail = detected.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("planner already had 3 of its 3 visits"),
        "{detail}"
    );
    let escalated = events
        .iter()
        .find(|e| e.kind == EventType::Escalated)
        .unwrap();
    assert_eq!(escalated.to.as_deref(), Some("human"));
    assert!(
        !events.iter().any(|e| e.kind.is_terminal()),
        "a person has it now"
    );
    Ok(())
}

async fn control_loop() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    for agent in ["control", "engineer", "executor", "terminator", "human"] {
        system
            .spec_worker(agent, &example(&format!("cmbagent/{agent}.toml")), &[])
            .await?;
    }
    Ok(system)
}

fn steps(names: &[&str]) -> Value {
    Value::Array(names.iter().map(|s| Value::from(*s)).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_control_loop_finishes_a_plan_at_the_terminator() -> anyhow::Result<()> {
    let system = control_loop().await?;
    let task = with_vars(
        "Run the analysis.",
        &[
            ("plan_steps", steps(&["load data", "fit model"])),
            ("max_n_attempts", Value::from(3)),
        ],
    );
    let events = system.run("control", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(
        agents(&done.path),
        [
            "control",
            "engineer",
            "executor",
            "control",
            "engineer",
            "executor",
            "control",
            "terminator"
        ]
    );
    let output = done.output.as_ref().unwrap();
    assert_eq!(field(output, "status"), Some(&Value::from("finished")));
    assert_eq!(field(output, "steps_done"), Some(&Value::from(2)));
    // control chose by function result: its handoffs carry its own reasons.
    assert_eq!(
        done.path[1].reason.as_ref().map(|r| r.as_str()),
        Some("next_step")
    );
    assert_eq!(
        done.path[7].reason.as_ref().map(|r| r.as_str()),
        Some("plan_finished")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_executions_reach_the_terminator_through_a_context_condition() -> anyhow::Result<()>
{
    let mut system = control_loop().await?;
    let task = with_vars(
        "Run the analysis.",
        &[
            ("plan_steps", steps(&["load data"])),
            ("max_n_attempts", Value::from(3)),
            ("fail_step", Value::from(0)),
        ],
    );
    let events = system.run("control", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(
        agents(&done.path),
        [
            "control",
            "engineer",
            "executor",
            "engineer",
            "executor",
            "engineer",
            "executor",
            "terminator"
        ]
    );
    let reasons: Vec<_> = done
        .path
        .iter()
        .map(|hop| {
            hop.reason
                .as_ref()
                .map(|r| r.as_str().to_owned())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        reasons[3], "context_condition",
        "a failure goes back to the engineer"
    );
    assert_eq!(
        reasons[7], "context_condition",
        "n_attempts >= max_n_attempts"
    );
    let output = done.output.as_ref().unwrap();
    assert_eq!(
        field(output, "status"),
        Some(&Value::from("stopped: max attempts reached"))
    );
    // The executor's stderr is logged; its line names the session (one
    // persistent process serves every session).
    let session = task.session.to_string();
    system
        .wait_log(
            "executor",
            "stderr: step 0 failed (attempt 3)",
            Duration::from_secs(5),
        )
        .await?;
    let log = system.process("executor").stderr();
    assert!(
        log.lines()
            .any(|line| line.contains("stderr: step 0 failed") && line.contains(&session)),
        "{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_answers_through_the_inbox_after_every_process_restarted() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system
        .spec_worker("triage", &example("support/triage.toml"), &[])
        .await?;
    system
        .spec_worker("human_support", &example("support/human_support.toml"), &[])
        .await?;
    system
        .lookup_until(&wants(&["human"]), Duration::from_secs(5), |a| {
            !a.candidates.is_empty()
        })
        .await?;
    let task = Envelope::task("This is the third time. Let me speak to a human!");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("triage")?, &task)
        .await?;
    let events = system
        .events_until(task.session, EventType::Waiting, Duration::from_secs(30))
        .await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "escalated", "accepted", "waiting"]
    );
    assert_eq!(events[1].to.as_deref(), Some("human_support"));

    let output = system.baton(&["inbox", "ls", "--json"]).output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let listed: Vec<serde_json::Value> = String::from_utf8(output.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["session"], task.session.to_string());
    assert_eq!(listed[0]["agent"], "human_support");
    assert_eq!(listed[0]["reason"], "user_escalation");
    let id = listed[0]["id"].as_str().unwrap().to_owned();

    // Every process goes away and comes back; the task still waits.
    system.process("triage").kill9();
    system.process("human_support").kill9();
    system.process("registry").kill9();
    tokio::task::block_in_place(|| system.server.restart())?;
    let output = system.baton(&["inbox", "show", &id]).output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown = String::from_utf8(output.stdout)?;
    assert!(shown.contains("Let me speak to a human!"), "{shown}");
    assert!(shown.contains("reason   user_escalation"), "{shown}");

    let answer = "Sorry for the trouble. I have refunded your order myself.";
    let output = system
        .baton(&["inbox", "reply", &id, answer, "--as", "alice"])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed);
    assert_eq!(done.output, Some(Value::from(answer)));
    assert_eq!(agents(&done.path), ["triage", "human_support"]);
    assert_eq!(done.path[1].instance, "alice");
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);

    // It is answered: gone from the inbox, and a second reply is refused.
    let output = system.baton(&["inbox", "ls"]).output()?;
    assert_eq!(
        String::from_utf8(output.stdout)?.trim(),
        "no tasks are waiting"
    );
    let output = system.baton(&["inbox", "reply", &id, "again"]).output()?;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("already answered?"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_agent_hands_off_through_a_tool_call_and_sends_the_exact_request()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer_to_refund",
        r#"{"reason": "knowledge_gap"}"#,
    )])])?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("assistant.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "assistant"
kind = "llm"
timeout_ms = 10000

[llm]
base_url = "{}"
model = "test-model"
api_key_env = "BATON_TEST_KEY"
system_prompt = "You are the shop's assistant."
temperature = 0.0

[[handoffs]]
to = "refund"
description = "Refund policy and refund requests."

[[llm_conditions]]
when = "The customer asks for a person."
to = "human"
"#,
            llm.url()
        ),
    )?;
    let mut system = System::start().await?;
    let mut command = system.baton(&["worker", "--spec", spec.to_str().unwrap(), "--no-registry"]);
    command.env("BATON_TEST_KEY", "sekret");
    let process = baton_testkit::ChildProcess::spawn(command, "assistant")?;
    system.adopt("assistant", process);
    system
        .wait_log("assistant", "worker started", Duration::from_secs(30))
        .await?;
    system.relay("refund", "refund", &[]).await?;

    let task = Envelope::task("Can I get my money back?");
    let events = system.run("assistant", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(agents(&done.path), ["assistant", "refund"]);
    assert_eq!(
        done.path[1].reason.as_ref().map(|r| r.as_str()),
        Some("knowledge_gap")
    );
    // The tool call and its result travelled in the conversation.
    let messages = field(done.output.as_ref().unwrap(), "messages")
        .and_then(Value::as_array)
        .unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m.as_str() == Some("transferred by transfer_to_refund")),
        "{messages:?}"
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.authorization.as_deref(), Some("Bearer sekret"));
    let body = &request.body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(
        body["messages"],
        serde_json::json!([
            {"role": "system", "content": "You are the shop's assistant."},
            {"role": "user", "content": "Can I get my money back?"},
        ])
    );
    let tools: Vec<(String, String)> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["function"]["name"].as_str().unwrap().to_owned(),
                t["function"]["description"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [
            (
                "transfer_to_refund".to_owned(),
                "Refund policy and refund requests.".to_owned()
            ),
            (
                "transfer_to_human".to_owned(),
                "The customer asks for a person.".to_owned()
            ),
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn baton_check_names_the_file_the_line_and_the_fix() -> anyhow::Result<()> {
    let system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\nkind = \"exec\"\n\n[exec]\ncommand = [\"x\"]\n\n[[conditions]]\nwhen = \"n >\"\nto = \"x\"\n",
    )?;
    let lonely = dir.path().join("lonely.toml");
    std::fs::write(
        &lonely,
        "name = \"lonely\"\nkind = \"exec\"\n[exec]\ncommand = [\"x\"]\n[after_work]\nto = \"ghost\"\n",
    )?;
    let output = system
        .baton(&["check", bad.to_str().unwrap(), lonely.to_str().unwrap()])
        .output()?;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr)?;
    assert!(
        stderr.contains(&format!(
            "error: {}:7: [[conditions]] when = \"n >\" is not a valid CEL expression",
            bad.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("routes to agent type ghost, which none of the given specs defines"),
        "{stderr}"
    );
    let stdout = String::from_utf8(output.stdout)?;
    assert!(stdout.contains("ok: lonely (exec, tier 1)"), "{stdout}");

    // A worker refuses to start from a bad spec, and says how to see why.
    let output = system
        .baton(&["worker", "--spec", bad.to_str().unwrap()])
        .output()?;
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr)?;
    assert!(stderr.contains("`baton check"), "{stderr}");
    assert!(stderr.contains(":7:"), "{stderr}");

    // The shipped examples are valid.
    let mut examples: Vec<String> = Vec::new();
    for dir in ["cmbagent", "support"] {
        for entry in std::fs::read_dir(example(dir))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "toml") {
                examples.push(path.to_string_lossy().into_owned());
            }
        }
    }
    let mut args = vec!["check"];
    args.extend(examples.iter().map(String::as_str));
    let output = system.baton(&args).output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8(output.stderr)?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_can_hand_the_task_on_with_their_answer() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .spec_worker("human_support", &example("support/human_support.toml"), &[])
        .await?;
    system
        .relay(
            "front",
            "front",
            &["--escalate", "--no-registry", "--fallback", "human_support"],
        )
        .await?;
    system.relay("refund", "refund", &[]).await?;
    let task = Envelope::task("I want my money back");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("front")?, &task)
        .await?;
    let events = system
        .events_until(task.session, EventType::Waiting, Duration::from_secs(30))
        .await?;
    let id = events.last().unwrap().envelope.unwrap().to_string();
    let output = system
        .baton(&[
            "inbox",
            "reply",
            &id,
            "Approved, please refund in full.",
            "--handoff",
            "refund",
        ])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8(output.stdout)?.contains("handed to refund"));
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let handoff = events
        .iter()
        .find(|e| e.kind == EventType::Handoff && e.agent.as_deref() == Some("human_support"))
        .expect("the person's handoff");
    assert_eq!(handoff.to.as_deref(), Some("refund"));
    let done = events.last().unwrap();
    assert_eq!(agents(&done.path), ["front", "human_support", "refund"]);
    let messages = field(done.output.as_ref().unwrap(), "messages")
        .and_then(Value::as_array)
        .unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m.as_str() == Some("Approved, please refund in full.")),
        "{messages:?}"
    );
    Ok(())
}

//! Delegation: serial, parallel (joined exactly once across a crash),
//! nested with a depth limit, async, chains, and a join deadline.

use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Envelope, Event, EventType, Value};
use baton_testkit::eventually;

use crate::util::{System, example, field, kinds};

fn list<'a>(output: &'a Value, key: &str) -> &'a [Value] {
    field(output, key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn strings(values: &[Value]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect()
}

fn detail(event: &Event) -> String {
    event.detail.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn serial_delegation_runs_three_children_in_order_each_seeing_the_earlier_results()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "lead",
            "lead",
            &["--delegate", "a,b,c", "--delegate-mode", "serial"],
        )
        .await?;
    for child in ["a", "b", "c"] {
        system.relay(child, child, &[]).await?;
    }
    let events = system.run("lead", &Envelope::task("build it")).await?;
    let flow: Vec<String> = events
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventType::Delegated | EventType::Result | EventType::Completed
            )
        })
        .map(|e| {
            format!(
                "{}:{}",
                e.kind,
                e.to.as_deref().or(e.agent.as_deref()).unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        flow,
        [
            "delegated:a",
            "result:lead",
            "delegated:b",
            "result:lead",
            "delegated:c",
            "result:lead",
            "completed:lead"
        ]
    );
    let done = events.last().unwrap();
    let output = done.output.as_ref().unwrap();
    assert_eq!(strings(list(output, "statuses")), ["completed"; 3]);
    assert_eq!(strings(list(output, "agents")), ["a", "b", "c"]);
    // c ran last and saw a's and b's results in its state.
    let c = &list(output, "results")[2];
    let seen = field(c, "state")
        .and_then(|s| field(s, "results"))
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(seen.len(), 2);
    // Only the root ends the session.
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    assert_eq!(done.agent.as_deref(), Some("lead"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parallel_fan_out_of_ten_joins_exactly_once_across_a_killed_worker() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    let pieces = ["piece"; 10].join(",");
    // The parent works 1.5 s before delegating and again in its continuation,
    // so it can be killed while it holds the result that completed the join.
    let fan_flags = [
        "--delegate",
        pieces.as_str(),
        "--work-ms",
        "1500",
        "--ack-wait-secs",
        "2",
    ];
    system.relay("fan1", "fan", &fan_flags).await?;
    system
        .relay("piece1", "piece", &["--concurrency", "4"])
        .await?;
    system
        .relay("piece2", "piece", &["--concurrency", "4"])
        .await?;
    let task = Envelope::task("split the work");
    system
        .client
        .submit_to(&AgentName::new("fan")?, &task)
        .await?;

    // Every result is recorded; the last one's continuation is now running in fan1.
    eventually(Duration::from_secs(30), || async {
        let events = system.stored_events(task.session).await?;
        let recorded = events
            .iter()
            .filter(|e| e.kind == EventType::Result && detail(e).ends_with(": recorded"))
            .count();
        anyhow::ensure!(recorded == 10, "only {recorded} results recorded");
        Ok(())
    })
    .await?;
    system.process("fan1").kill9();
    system.relay("fan2", "fan", &fan_flags).await?;

    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed);
    assert_eq!(
        done.instance.as_deref(),
        Some("fan2"),
        "the replacement finished the join"
    );
    let output = done.output.as_ref().unwrap();
    assert_eq!(list(output, "results").len(), 10);
    assert_eq!(strings(list(output, "statuses")), ["completed"; 10]);

    // A result that arrives twice is recorded once and otherwise dropped.
    let all = system.stored_events(task.session).await?;
    let mut duplicate = Envelope::task("late");
    duplicate.session = task.session;
    duplicate.kind = baton_proto::Kind::Result;
    duplicate.status = Some(baton_proto::ResultStatus::Completed);
    duplicate.output = Some(Value::from("again"));
    duplicate.from = Some(baton_proto::AgentName::from_static("piece"));
    duplicate.parent = Some(baton_proto::Parent {
        id: join_of(&all),
        agent: baton_proto::AgentName::from_static("fan"),
        depth: 1,
        index: Some(3),
        assignment: None,
        extra: baton_proto::Map::new(),
    });
    system
        .publish_envelope("baton.agent.fan", &duplicate)
        .await?;
    let events = eventually(Duration::from_secs(10), || async {
        let events = system.stored_events(task.session).await?;
        let reported = events.iter().any(|e| {
            e.kind == EventType::Result
                && detail(e).contains("dropped: the join is already complete")
        });
        anyhow::ensure!(
            reported,
            "the duplicate was not reported: {:?}",
            kinds(&events)
        );
        Ok(events)
    })
    .await?;
    assert_eq!(
        events.iter().filter(|e| e.kind.is_terminal()).count(),
        1,
        "{:?}",
        kinds(&events)
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind == EventType::Result && detail(e).ends_with(": recorded"))
            .count(),
        10
    );

    // fan1 recorded the last result and started the continuation, then died;
    // that result was redelivered to fan2, which ran the continuation again.
    assert!(
        system
            .process("fan1")
            .stderr()
            .contains("fan resumed with 10 of 10 results")
    );
    assert!(
        system
            .process("fan2")
            .stderr()
            .contains("fan resumed with 10 of 10 results")
    );
    Ok(())
}

/// The delegating envelope's id, from the `delegated` events.
fn join_of(events: &[Event]) -> uuid::Uuid {
    events
        .iter()
        .find(|e| e.kind == EventType::Delegated)
        .and_then(|e| e.envelope)
        .expect("a delegated event")
}

#[tokio::test(flavor = "multi_thread")]
async fn nested_delegation_goes_three_levels_deep() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("l1", "level1", &["--delegate", "level2"])
        .await?;
    system
        .relay("l2", "level2", &["--delegate", "level3"])
        .await?;
    system
        .relay("l3", "level3", &["--delegate", "level4"])
        .await?;
    system.relay("l4", "level4", &[]).await?;
    let events = system.run("level1", &Envelope::task("dig")).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed);
    let delegated: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::Delegated)
        .map(|e| {
            (
                e.agent.as_deref().unwrap_or_default().to_owned(),
                e.to.as_deref().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        delegated,
        [
            ("level1".to_owned(), "level2".to_owned()),
            ("level2".to_owned(), "level3".to_owned()),
            ("level3".to_owned(), "level4".to_owned())
        ]
    );
    // level1's answer holds level2's, which holds level3's, which holds level4's.
    let level2 = &list(done.output.as_ref().unwrap(), "results")[0];
    let level3 = &list(level2, "results")[0];
    let level4 = &list(level3, "results")[0];
    assert!(field(level4, "messages").is_some(), "{level4:?}");
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_depth_limit_stops_a_fifth_level() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    for level in 1..=5 {
        let name = format!("m{level}");
        let next = format!("m{}", level + 1);
        system
            .relay(
                &name,
                &name,
                &["--delegate", &next, "--max-delegation-depth", "4"],
            )
            .await?;
    }
    system.relay("m6", "m6", &[]).await?;
    let events = system.run("m1", &Envelope::task("dig deeper")).await?;
    let done = events.last().unwrap();
    assert_eq!(
        done.kind,
        EventType::Completed,
        "failures come back as failed results"
    );
    // m5 is at depth 4 and may not delegate: it dead-letters with the reason.
    let refused = events
        .iter()
        .find(|e| e.kind == EventType::DeadLettered)
        .expect("a dead letter");
    assert_eq!(refused.agent.as_deref(), Some("m5"));
    assert!(
        detail(refused).contains("delegation depth limit 4 reached"),
        "{}",
        detail(refused)
    );
    assert!(!events.iter().any(|e| e.agent.as_deref() == Some("m6")));
    // m4 got m5's failure as a failed result.
    let m2 = &list(done.output.as_ref().unwrap(), "results")[0];
    let m3 = &list(m2, "results")[0];
    let m4 = &list(m3, "results")[0];
    assert_eq!(strings(list(m4, "statuses")), ["failed"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn async_delegation_reports_results_as_they_come() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "boss",
            "boss",
            &["--delegate", "slow,fast,mid", "--delegate-mode", "async"],
        )
        .await?;
    system.relay("fast", "fast", &["--work-ms", "50"]).await?;
    system.relay("mid", "mid", &["--work-ms", "700"]).await?;
    system.relay("slow", "slow", &["--work-ms", "1400"]).await?;
    let events = system.run("boss", &Envelope::task("go")).await?;
    let arrivals: Vec<String> = events
        .iter()
        .filter(|e| e.kind == EventType::Result)
        .map(detail)
        .collect();
    assert_eq!(arrivals.len(), 3, "{arrivals:?}");
    assert!(
        arrivals[0].starts_with("completed result from fast"),
        "{arrivals:?}"
    );
    assert!(
        arrivals[1].starts_with("completed result from mid"),
        "{arrivals:?}"
    );
    assert!(
        arrivals[2].starts_with("completed result from slow"),
        "{arrivals:?}"
    );
    let log = system.process("boss").stderr();
    let reports: Vec<&str> = log
        .lines()
        .filter_map(|line| line.split("boss resumed with ").nth(1))
        .map(|rest| rest.split(" received=").next().unwrap_or(rest))
        .collect();
    assert_eq!(
        reports,
        ["1 of 3 results", "2 of 3 results", "3 of 3 results"]
    );
    let done = events.last().unwrap();
    // Results are kept in child order, whatever order they came in.
    assert_eq!(
        strings(list(done.output.as_ref().unwrap(), "agents")),
        ["slow", "fast", "mid"]
    );
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_short_circuits_on_failure_and_recovers_when_told() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "pipe",
            "pipe",
            &[
                "--delegate",
                "first,broken,last",
                "--delegate-mode",
                "chain",
            ],
        )
        .await?;
    system
        .relay(
            "pipe_r",
            "pipe_r",
            &[
                "--delegate",
                "first,broken,last",
                "--delegate-mode",
                "chain",
                "--recover",
                "fixer",
            ],
        )
        .await?;
    system.relay("first", "first", &[]).await?;
    system.relay("broken", "broken", &["--fatal"]).await?;
    system.relay("last", "last", &[]).await?;
    system.relay("fixer", "fixer", &[]).await?;

    let events = system.run("pipe", &Envelope::task("process")).await?;
    let output = events.last().unwrap().output.clone().unwrap();
    assert_eq!(strings(list(&output, "statuses")), ["completed", "failed"]);
    assert_eq!(field(&output, "total"), Some(&Value::from(3)));
    assert!(
        !events.iter().any(|e| e.to.as_deref() == Some("last")),
        "the chain stopped before `last`"
    );
    let failed = &list(&output, "results")[1];
    let why = field(failed, "failed")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(why.contains("configured to fail fatally"), "{why}");

    let events = system.run("pipe_r", &Envelope::task("process")).await?;
    let output = events.last().unwrap().output.clone().unwrap();
    assert_eq!(strings(list(&output, "statuses")), ["completed"; 3]);
    assert_eq!(strings(list(&output, "agents")), ["first", "fixer", "last"]);
    // Each step's output was the next one's input: the fixer got the failure,
    // and its output reached `last`.
    let last = &list(&output, "results")[2];
    let messages = strings(list(last, "messages"));
    assert!(
        messages
            .iter()
            .any(|m| m.contains("broken is configured to fail fatally")),
        "{messages:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_after_the_joins_deadline_is_recorded_in_an_event_and_dropped()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "waiter",
            "waiter",
            &["--delegate", "quick,sluggish", "--join-timeout-ms", "600"],
        )
        .await?;
    system.relay("quick", "quick", &[]).await?;
    system
        .relay("sluggish", "sluggish", &["--work-ms", "2000"])
        .await?;
    let task = Envelope::task("hurry");
    let events = system.run("waiter", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed);
    let output = done.output.as_ref().unwrap();
    assert_eq!(strings(list(output, "statuses")), ["completed", "failed"]);
    let missed = field(&list(output, "results")[1], "failed")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(missed.contains("deadline_exceeded"), "{missed}");
    // The sluggish result arrives later: an event says it was dropped.
    let (late, terminal) = eventually(Duration::from_secs(10), || async {
        let events = system.stored_events(task.session).await?;
        let late = events
            .iter()
            .find(|e| e.kind == EventType::Result && detail(e).contains("sluggish"))
            .map(|late| detail(late).to_owned())
            .context("no event for the late result")?;
        Ok::<_, anyhow::Error>((late, events.iter().filter(|e| e.kind.is_terminal()).count()))
    })
    .await?;
    assert!(late.contains("dropped"), "{late}");
    assert_eq!(terminal, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_team_up_example_shows_a_nested_parallel_team_in_its_events() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    for role in ["orchestrator", "team_lead", "developer"] {
        system
            .spec_worker(
                role,
                &example(&format!("teamup/{role}.toml")),
                &["--no-registry"],
            )
            .await?;
    }
    let task = Envelope::task("a shop");
    let events = system.run("orchestrator", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(
        done.kind,
        EventType::Completed,
        "{:?}",
        events
            .iter()
            .map(|e| format!("{} {}", e.kind, detail(e)))
            .collect::<Vec<_>>()
    );
    let output = done.output.as_ref().unwrap();
    assert_eq!(field(output, "delivered"), Some(&Value::from(true)));
    let parts = field(output, "report")
        .and_then(|r| field(r, "parts"))
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(strings(parts), ["done: the API", "done: the web page"]);

    // `baton watch` tells the story.
    let output = system
        .baton(&["watch", &task.session.to_string()])
        .output()?;
    let story = String::from_utf8(output.stdout)?;
    assert_eq!(
        story.matches("orchestrator delegated to team_lead").count(),
        1,
        "{story}"
    );
    assert_eq!(
        story.matches("team_lead delegated to developer").count(),
        2,
        "{story}"
    );
    assert_eq!(
        story.matches("team_lead got a result").count(),
        2,
        "{story}"
    );
    assert_eq!(
        story.matches("orchestrator got a result").count(),
        1,
        "{story}"
    );
    assert!(story.contains("completed:"), "{story}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_agent_calls_two_delegates_in_one_turn_and_gets_their_results() -> anyhow::Result<()>
{
    let llm = baton_testkit::FakeLlm::start(vec![
        baton_testkit::Scripted::tool_calls(&[
            ("agent_run_researcher", r#"{"task": "find the facts"}"#),
            ("agent_run_writer", r#"{"task": "draft the intro"}"#),
        ]),
        baton_testkit::Scripted::text("Facts and intro, combined."),
    ])?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("editor.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "editor"
kind = "llm"
timeout_ms = 10000

[llm]
base_url = "{}"
model = "m"

[[delegates]]
agent = "researcher"
description = "Finds facts."

[[delegates]]
agent = "writer"
"#,
            llm.url()
        ),
    )?;
    let mut system = System::start().await?;
    system
        .spec_worker("editor", &spec, &["--no-registry"])
        .await?;
    system.relay("researcher", "researcher", &[]).await?;
    system.relay("writer", "writer", &[]).await?;
    let events = system
        .run("editor", &Envelope::task("Write an article"))
        .await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(done.output, Some(Value::from("Facts and intro, combined.")));
    let delegated: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::Delegated)
        .map(|e| (e.to.as_deref().unwrap_or_default().to_owned(), detail(e)))
        .collect();
    assert_eq!(
        delegated,
        [
            ("researcher".to_owned(), "find the facts".to_owned()),
            ("writer".to_owned(), "draft the intro".to_owned())
        ]
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let tools = requests[0].body["tools"].as_array().unwrap();
    assert_eq!(tools[0]["function"]["name"], "agent_run_researcher");
    assert_eq!(tools[0]["function"]["description"], "Finds facts.");
    assert_eq!(
        tools[0]["function"]["parameters"]["required"],
        serde_json::json!(["task"])
    );
    assert_eq!(tools[1]["function"]["name"], "agent_run_writer");
    // The second request carries the call and both results as tool results.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 3]["role"], "assistant");
    assert_eq!(messages[n - 3]["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(messages[n - 2]["tool_call_id"], "call_0");
    assert!(
        messages[n - 2]["content"]
            .as_str()
            .unwrap()
            .contains("find the facts")
    );
    assert_eq!(messages[n - 1]["tool_call_id"], "call_1");
    assert!(
        messages[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("draft the intro")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_spec_stands_in_a_value_for_a_failed_step() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("pipeline.toml");
    std::fs::write(
        &spec,
        "name = \"pipeline\"\nkind = \"chain\"\n\n[chain]\nsteps = [\"first\", \"broken\", \"last\"]\nrecover_value = \"n/a\"\n",
    )?;
    let mut system = System::start().await?;
    system
        .spec_worker("pipeline", &spec, &["--no-registry"])
        .await?;
    system.relay("first", "first", &[]).await?;
    system.relay("broken", "broken", &["--fatal"]).await?;
    system.relay("last", "last", &[]).await?;
    let events = system.run("pipeline", &Envelope::task("process")).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    let results = done.output.as_ref().and_then(Value::as_array).unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[1], Value::from("n/a"));
    // `last` got the stand-in as its input.
    let last_messages = strings(list(&results[2], "messages"));
    assert_eq!(last_messages.last().map(String::as_str), Some("n/a"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_that_belongs_to_no_delegation_is_dead_lettered() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("lead", "lead", &[]).await?;
    let mut stray = Envelope::task("stray");
    stray.kind = baton_proto::Kind::Result;
    stray.status = Some(baton_proto::ResultStatus::Completed);
    system.publish_envelope("baton.agent.lead", &stray).await?;
    let dead = eventually(Duration::from_secs(10), || async {
        let dead = system.client.dead_letters().await?;
        anyhow::ensure!(!dead.is_empty(), "nothing was dead-lettered");
        Ok(dead)
    })
    .await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "malformed");
    assert!(
        dead[0].detail.contains("without `parent`"),
        "{}",
        dead[0].detail
    );
    // The worker keeps serving.
    let events = system.run("lead", &Envelope::task("still there?")).await?;
    assert_eq!(events.last().unwrap().kind, EventType::Completed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_answering_a_delegated_task_answers_the_parent() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.human_support().await?;
    system
        .relay("asker", "asker", &["--delegate", "human_support"])
        .await?;
    let task = Envelope::task("Is this refund fair?");
    system
        .client
        .submit_to(&AgentName::new("asker")?, &task)
        .await?;
    let id = eventually(Duration::from_secs(20), || async {
        let output = system.baton(&["inbox", "ls", "--json"]).output()?;
        let text = String::from_utf8(output.stdout)?;
        let line = text.lines().next().context("nothing reached the inbox")?;
        let entry: serde_json::Value = serde_json::from_str(line)?;
        Ok::<_, anyhow::Error>(entry["id"].as_str().unwrap_or_default().to_owned())
    })
    .await?;
    let output = system
        .baton(&["inbox", "reply", &id, "Yes, it is fair."])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8(output.stdout)?.contains("answer sent to asker"));
    let events = system
        .session_events(task.session, Duration::from_secs(20))
        .await?;
    let done = events.last().unwrap();
    assert_eq!(
        done.agent.as_deref(),
        Some("asker"),
        "the root ends the session"
    );
    assert_eq!(
        list(done.output.as_ref().unwrap(), "results"),
        [Value::from("Yes, it is fair.")]
    );
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parallel_delegation_joins_under_the_generated_worker_blocks() -> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("lead", &["worker", "lead", "--to", "a,b"]),
        ("a", &["worker", "a", "--to", "lead"]),
        ("b", &["worker", "b", "--to", "lead"]),
        ("client", &["client"]),
    ];
    let config = crate::operations::permissions::generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let router = crate::operations::permissions::as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let lead = crate::operations::permissions::as_user("lead");
    let mut flags: Vec<&str> = lead.iter().map(String::as_str).collect();
    flags.extend([
        "--no-registry",
        "--no-fallback",
        "--delegate",
        "a,b",
        "--delegate-mode",
        "parallel",
    ]);
    system.relay("lead", "lead", &flags).await?;
    for child in ["a", "b"] {
        let user = crate::operations::permissions::as_user(child);
        let mut flags: Vec<&str> = user.iter().map(String::as_str).collect();
        flags.extend(["--no-registry", "--no-fallback"]);
        system.relay(child, child, &flags).await?;
    }
    let sent = crate::operations::permissions::ok_as(
        &system,
        "client",
        &["send", "--to", "lead", "--json", "split this"],
    )?;
    let sent: serde_json::Value = serde_json::from_slice(&sent.stdout)?;
    let session: uuid::Uuid = sent["session"].as_str().unwrap_or_default().parse()?;
    let end = system.client.wait(session, Duration::from_secs(30)).await;
    let logs: String = ["router", "lead", "a", "b"]
        .iter()
        .map(|l| system.process(l).output())
        .collect();
    let end = end.map_err(|e| anyhow::anyhow!("{e}\n{logs}"))?;
    assert_eq!(end.kind, EventType::Completed, "{end:?}\n{logs}");
    let events = system.stored_events(session).await?;
    let kinds: Vec<String> = events.iter().map(|e| e.kind.to_string()).collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "delegated").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "result").count(),
        2,
        "{kinds:?}"
    );
    assert!(!logs.contains("Permissions Violation"), "{logs}");
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

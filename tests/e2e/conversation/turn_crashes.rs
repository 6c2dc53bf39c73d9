//! A conversation's turns survive kill -9 of the workers and the router
//! mid-turn: four messages queued at once across a handoff are each
//! answered once, in order, each seeing the ones before it.

use std::time::Duration;

use baton_testkit::{FakeLlm, Scripted};
use serde_json::Value;

use crate::conversation::conversations::{Desk, asked, desk_with};
use crate::gateways::a2a::client;
use crate::util::System;

/// The text of the last user message of a model request.
fn last_user(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Waits until `llm` has been asked `n` times.
async fn asked_times(llm: &FakeLlm, n: usize) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while llm.requests().len() < n {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the model was asked {} times, not {n}",
            llm.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Kills process `label` with SIGKILL and starts `again` from the same spec.
async fn replace(
    system: &mut System,
    label: &str,
    again: &str,
    spec: &std::path::Path,
) -> anyhow::Result<()> {
    system.process(label).kill9();
    let spec = spec.to_string_lossy().into_owned();
    let args = [
        "worker",
        "--spec",
        spec.as_str(),
        "--no-registry",
        "--ack-wait-secs",
        "2",
    ];
    system.spawn(again, &args, "worker started").await
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_and_the_router_killed_mid_turn_lose_double_and_reorder_no_turn()
-> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer_to_refunds",
        r#"{"reason": "refund"}"#,
    )])])?;
    // Refunds answers each turn after 1.5 s, naming the message it answers.
    let refunds = FakeLlm::responding(|body| {
        Scripted::text(&format!("Answered: {}", last_user(body))).after(Duration::from_millis(1500))
    })?;
    let more = Desk {
        workers: &["--ack-wait-secs", "2"],
        ..Desk::default()
    };
    let (mut system, url, dir) = desk_with(&triage, &refunds, more, &[]).await?;
    let context = uuid::Uuid::new_v4().to_string();
    let texts = ["one", "two", "three", "four"];
    let mut args = vec![context.as_str()];
    args.extend_from_slice(&texts);
    let posted = client(&url, "post", &args)?;
    let sessions: Vec<uuid::Uuid> = posted["ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str()?.parse().ok())
        .collect();
    assert_eq!(sessions.len(), 4, "{posted}");
    let spec = dir.path().join("refunds.toml");
    // Turn 1 waits on refunds' model: its worker dies with the hop unacked.
    asked_times(&refunds, 1).await?;
    replace(&mut system, "refunds", "refunds2", &spec).await?;
    // Later, while turn 2 or 3 runs, the worker dies again, and so does the
    // router, whose keeper starts queued turns.
    asked_times(&refunds, 3).await?;
    replace(&mut system, "refunds2", "refunds3", &spec).await?;
    system.process("router").kill9();
    tokio::time::sleep(Duration::from_millis(500)).await;
    system
        .spawn(
            "router2",
            &["router", "--default-agent", "triage", "--no-registry"],
            "router started",
        )
        .await?;
    let mut answers = Vec::new();
    for (session, text) in sessions.iter().zip(texts) {
        let end = system
            .client
            .wait(*session, Duration::from_secs(60))
            .await?;
        assert_eq!(end.kind, baton_proto::EventType::Completed, "turn {text}");
        let stored = system.stored_events(*session).await?;
        let ends = stored.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(ends, 1, "turn {text} ends once");
        answers.push(
            end.output
                .as_ref()
                .and_then(|o| o.as_str())
                .unwrap_or_default()
                .to_owned(),
        );
    }
    // Each answered once, in order, none skipped.
    assert_eq!(
        answers,
        [
            "Answered: one",
            "Answered: two",
            "Answered: three",
            "Answered: four"
        ]
    );
    // Triage was asked once: the holder took turns 2 to 4.
    assert_eq!(triage.requests().len(), 1);
    // The last turn saw every message and every answer before it, in order,
    // each once.
    let last = asked(&refunds, refunds.requests().len() - 1);
    let said: Vec<&String> = last
        .iter()
        .filter(|m| m.starts_with("user: ") || m.starts_with("assistant: Answered"))
        .collect();
    assert_eq!(
        said,
        [
            "user: one",
            "assistant: Answered: one",
            "user: two",
            "assistant: Answered: two",
            "user: three",
            "assistant: Answered: three",
            "user: four"
        ],
        "{last:#?}"
    );
    // The record counts four turns, none running.
    let jetstream = async_nats::jetstream::new(system.nats.clone());
    let bucket = jetstream
        .get_key_value(system.client.subjects().conversations_bucket())
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = bucket
        .get(baton_proto::Conversation::key_of(&context))
        .await?
        .expect("the record");
    let record: baton_proto::Conversation = rmp_serde::from_slice(&stored)?;
    assert_eq!((record.turns, record.running.is_none()), (4, true));
    assert_eq!(record.holder.as_deref(), Some("refunds"));
    Ok(())
}

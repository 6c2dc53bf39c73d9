//! A conversation's transcript is stored once, an entry per turn: each
//! turn's task carries only its own message and a reference to the entries
//! before it, so it stays the same size as the conversation grows; the
//! worker that runs it gives its model the whole conversation, read from
//! the entries when it never saw them; and a turn whose transcript is gone
//! is dead-lettered with the reason, not run on half a conversation.

use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{Conversation, DeadLetterReason, Envelope, Wire};
use baton_testkit::{FakeLlm, Scripted};
use futures::StreamExt;
use serde_json::Value;

use crate::conversation::conversations::{Desk, desk_with};
use crate::gateways::a2a::client;
use crate::util::System;

/// The user messages of a recorded model request, in order.
fn users(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|message| message["role"] == "user")
        .filter_map(|message| message["content"].as_str().map(str::to_owned))
        .collect()
}

/// Kills the `refunds` worker and starts another, which remembers nothing.
async fn new_refunds_worker(system: &mut System, dir: &std::path::Path) -> anyhow::Result<()> {
    system.settled().await?;
    system.process("refunds").kill9();
    let spec = dir.join("refunds.toml").to_string_lossy().into_owned();
    let args = ["worker", "--spec", spec.as_str(), "--no-registry"];
    system.spawn("refunds-again", &args, "worker started").await
}

/// The keys of conversation `id`'s transcript entries.
pub(crate) async fn entries(system: &System, id: &str) -> anyhow::Result<Vec<String>> {
    let store = jetstream::new(system.nats.clone())
        .get_key_value("BATON_TRANSCRIPTS")
        .await?;
    let key = Conversation::key_of(id);
    let hex = key.trim_start_matches("c.");
    let mut keys: Vec<String> = store
        .keys()
        .await?
        .filter_map(|key| async move { key.ok() })
        .filter(|key| std::future::ready(key.starts_with(hex)))
        .collect()
        .await;
    keys.sort_by_key(|key| key.rsplit('.').next().and_then(|n| n.parse::<u32>().ok()));
    Ok(keys)
}

const TEXTS: [&str; 5] = [
    "Refund ABC-123, please.",
    "I am Ada.",
    "Order ABC-123.",
    "Yes.",
    "Thanks.",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_carries_only_its_own_message_and_a_new_worker_reads_the_rest() -> anyhow::Result<()>
{
    let triage = crate::conversation::conversations::transferring()?;
    let answers = (1..=5).map(|n| Scripted::text(&format!("Answer {n}.")));
    let refunds = FakeLlm::start(answers.collect())?;
    let (mut system, url, dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let mut published = system.nats.subscribe("baton.agent.refunds").await?;
    system.nats.flush().await?;
    let context = uuid::Uuid::new_v4().to_string();
    let mut sessions = Vec::new();
    for (n, text) in TEXTS.iter().enumerate() {
        if n == 3 {
            // Turn 4 goes to a worker that never saw the conversation.
            new_refunds_worker(&mut system, dir.path()).await?;
        }
        let turn = client(&url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
        sessions.push(turn["id"].as_str().unwrap_or_default().to_owned());
    }
    // The model was asked once per turn, and always saw the conversation
    // so far: the worker that never saw it read it from the transcript.
    let asked = refunds.requests();
    assert_eq!(asked.len(), 5);
    for (n, request) in asked.iter().enumerate() {
        assert_eq!(users(&request.body), TEXTS[..=n], "turn {}", n + 1);
    }
    let answers: Vec<String> = asked[4].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    for n in 1..=4 {
        assert!(answers.contains(&format!("Answer {n}.")), "{answers:?}");
    }
    // Each later turn's task carried its own message and a reference to
    // the turns before; its size did not grow with them.
    let mut sizes = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), published.next()).await
    {
        let task = Envelope::from_msgpack(&message.payload)?;
        let Some(turn) = task.conversation.as_ref().map(|of| of.turn) else {
            continue;
        };
        if turn == 1 {
            continue;
        }
        let text = TEXTS[turn as usize - 1];
        let contents: Vec<&str> = task
            .context
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(contents, [text], "turn {turn}");
        let history = task
            .context
            .history
            .clone()
            .expect("a later turn refers to its history");
        assert_eq!(
            (history.conversation.as_str(), history.entries),
            (context.as_str(), turn - 1)
        );
        // The text is in the task twice: its message and its query.
        sizes.push(message.payload.len() - 2 * text.len());
    }
    assert_eq!(sizes.len(), 4, "{sizes:?}");
    let spread = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0);
    assert!(spread <= 8, "the later turns' tasks grew: {sizes:?}");
    // The transcript holds an entry per turn, and the last turn's end only
    // what that turn added.
    baton_testkit::eventually(Duration::from_secs(10), || async {
        let keys = entries(&system, &context).await?;
        anyhow::ensure!(keys.len() == 5, "{keys:?}");
        Ok(())
    })
    .await?;
    let last = system.stored_events(sessions[4].parse()?).await?;
    let end = last
        .last()
        .and_then(|event| event.context.clone())
        .expect("an end with its context");
    let first = end.messages.first().map(|m| m.content.as_str());
    assert_eq!(first, Some(TEXTS[4]));
    assert_eq!(end.history.map(|h| h.entries), Some(4));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_whose_transcript_is_gone_is_dead_lettered_with_the_reason() -> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = FakeLlm::start(vec![
        Scripted::text("Who are you?"),
        Scripted::text("Done."),
    ])?;
    let (mut system, url, dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let context = uuid::Uuid::new_v4().to_string();
    for text in &TEXTS[..2] {
        let turn = client(&url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
    }
    baton_testkit::eventually(Duration::from_secs(10), || async {
        let keys = entries(&system, &context).await?;
        anyhow::ensure!(keys.len() == 2, "{keys:?}");
        Ok(())
    })
    .await?;
    // Its first entry is lost, and the worker that held it in memory too.
    let store = jetstream::new(system.nats.clone())
        .get_key_value("BATON_TRANSCRIPTS")
        .await?;
    store.purge(Conversation::entry_key(&context, 1)).await?;
    new_refunds_worker(&mut system, dir.path()).await?;
    let turn = client(&url, "say", &[&context, TEXTS[2]])?;
    assert_eq!(turn["state"], "TASK_STATE_FAILED", "{turn}");
    assert_eq!(
        refunds.requests().len(),
        2,
        "the model was asked on half a conversation"
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].reason, DeadLetterReason::ClaimMissing);
    assert_eq!(dead[0].agent, "refunds");
    assert!(
        dead[0].detail.contains("transcript") && dead[0].detail.contains("entry 1"),
        "{}",
        dead[0].detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_at_turn_two_asks_the_model_exactly_what_turn_three_asked() -> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let answers = ["Who are you?", "Which order?", "Refunded.", "Refunded."];
    let refunds = FakeLlm::start(answers.iter().map(|text| Scripted::text(text)).collect())?;
    let (system, _url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let id = "fork-source";
    for text in &TEXTS[..3] {
        system.baton_stdout(&["send", "--conversation", id, "--wait", text])?;
    }
    let forked = ["conversations", "fork", id, "--at", "2", "--id", "fork-1"];
    assert_eq!(system.baton_stdout(&forked)?, "fork-1\n");
    // Forking asked no model.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 3));
    // The fork has the first two turns, their sessions, and their holder.
    let show = |id: &str| -> anyhow::Result<Value> {
        let shown = system.baton_stdout(&["conversations", "show", id, "--json"])?;
        Ok(serde_json::from_str(&shown)?)
    };
    let (source, fork) = (show(id)?, show("fork-1")?);
    let sessions = |shown: &Value| -> Vec<String> {
        shown["turns_listed"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|turn| turn["session"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(sessions(&fork), sessions(&source)[..2], "{fork}");
    assert_eq!(fork["holder"], "refunds", "{fork}");
    // Its next message, the source's third, asks exactly what the source's
    // third turn asked.
    system.baton_stdout(&["send", "--conversation", "fork-1", "--wait", TEXTS[2]])?;
    let asked = refunds.requests();
    assert_eq!(asked.len(), 4);
    assert_eq!(
        serde_json::to_string(&asked[3].body)?,
        serde_json::to_string(&asked[2].body)?
    );
    assert_eq!(users(&asked[3].body), TEXTS[..3]);
    // What cannot be forked says why.
    for (args, why) in [
        (
            &["conversations", "fork", id, "--at", "9"][..],
            "turn 9 of conversation fork-source has not ended",
        ),
        (
            &["conversations", "fork", id, "--at", "1", "--as", "fork-1"][..],
            "conversation fork-1 exists already",
        ),
        (
            &["conversations", "fork", "nope", "--at", "1"][..],
            "no conversation nope",
        ),
    ] {
        let output = system.baton(args).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_that_waited_for_its_turns_leaves_no_consumer_behind() -> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let answers = (1..=5).map(|n| Scripted::text(&format!("Answer {n}.")));
    let refunds = FakeLlm::start(answers.collect())?;
    let (system, url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let jetstream = jetstream::new(system.nats.clone());
    let consumers = || async {
        let mut events = jetstream.get_stream("BATON_EVENTS").await?;
        anyhow::Ok(events.info().await?.state.consumer_count)
    };
    let before = consumers().await?;
    let context = uuid::Uuid::new_v4().to_string();
    for text in TEXTS {
        let turn = client(&url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
    }
    // Each blocking call read its turn's events with a consumer of its own;
    // done, it deleted it, well before the 30 s an idle one would live.
    baton_testkit::eventually(Duration::from_secs(5), || async {
        let now = consumers().await?;
        anyhow::ensure!(
            now <= before,
            "{now} consumers on the events stream, {before} before"
        );
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_turn_refers_to_the_transcript_for_its_text_and_readers_show_it()
-> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let answers = ["Who are you?", "Which order?", "Refunded."];
    let refunds = FakeLlm::start(answers.iter().map(|text| Scripted::text(text)).collect())?;
    let (system, _url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let id = "listed-once";
    for text in &TEXTS[..3] {
        system.baton_stdout(&["send", "--conversation", id, "--wait", text])?;
    }
    // Each listing keeps no text, only where the transcript holds it.
    let store = jetstream::new(system.nats.clone())
        .get_key_value("BATON_CONVERSATIONS")
        .await?;
    for (n, text) in TEXTS[..3].iter().enumerate() {
        let turn = u32::try_from(n)? + 1;
        let key = Conversation::turn_key(id, turn);
        let bytes = baton_testkit::eventually(Duration::from_secs(10), || async {
            store
                .get(&key)
                .await?
                .ok_or_else(|| anyhow::anyhow!("{key} not listed yet"))
        })
        .await?;
        let listed: baton_proto::ConversationTurn = rmp_serde::from_slice(&bytes)?;
        assert_eq!(listed.text, "", "turn {turn}");
        assert_eq!(listed.text_at.map(|at| at.entry), Some(turn), "turn {turn}");
        let raw = String::from_utf8_lossy(&bytes);
        assert!(
            !raw.contains(text),
            "turn {turn}'s listing repeats its text"
        );
    }
    // Readers put the text back: `conversations show`, and a fork's, whose
    // listings and entries are copies.
    let forked = [
        "conversations",
        "fork",
        id,
        "--at",
        "2",
        "--id",
        "listed-fork",
    ];
    assert_eq!(system.baton_stdout(&forked)?, "listed-fork\n");
    for (conversation, turns) in [(id, 3), ("listed-fork", 2)] {
        let shown = system.baton_stdout(&["conversations", "show", conversation, "--json"])?;
        let shown: Value = serde_json::from_str(&shown)?;
        let texts: Vec<&str> = (shown["turns_listed"].as_array().into_iter().flatten())
            .filter_map(|turn| turn["text"].as_str())
            .collect();
        assert_eq!(texts, TEXTS[..turns], "{conversation}: {shown}");
        let plain = system.baton_stdout(&["conversations", "show", conversation])?;
        assert!(plain.contains(TEXTS[1]), "{plain}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_keeps_the_answer_once_and_every_reader_shows_it() -> anyhow::Result<()> {
    let question = "Please refund order ABC-123: it arrived broken and I would like my money back.";
    let answer = "Refunded: order ABC-123 is refunded in full, and the money reaches your card within five days.";
    let triage = crate::conversation::conversations::transferring()?;
    let second =
        "It is on its way back to your card: banks take up to five working days to show it.";
    let refunds = FakeLlm::start(vec![Scripted::text(answer), Scripted::text(second)])?;
    let (system, url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let context = uuid::Uuid::new_v4().to_string();
    // The A2A gateway reads the end: the answer is there.
    let turn = client(&url, "say", &[&context, question])?;
    assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
    assert!(turn.to_string().contains(answer), "{turn}");
    let session: uuid::Uuid = turn["id"].as_str().unwrap_or_default().parse()?;
    // As stored, the end holds the answer and the question once each.
    let stream = jetstream::new(system.nats.clone())
        .get_stream("BATON_EVENTS")
        .await?;
    let raw = stream
        .get_last_raw_message_by_subject(&format!("baton.events.{session}"))
        .await?;
    let count = |text: &str| {
        (raw.payload.windows(text.len()))
            .filter(|window| *window == text.as_bytes())
            .count()
    };
    assert_eq!((count(answer), count(question)), (1, 1));
    let stored: rmpv::Value = rmp_serde::from_slice(&raw.payload)?;
    let field = |name: &str| {
        (stored.as_map().into_iter().flatten())
            .find(|(key, _)| key.as_str() == Some(name))
            .map(|(_, value)| value.clone())
    };
    assert_eq!(
        field("type")
            .and_then(|t| t.as_str().map(str::to_owned))
            .as_deref(),
        Some("completed")
    );
    assert_eq!(field("output"), None);
    assert!(field("refs").is_some());
    // Which a reader of version 1 would misread: the event says version 2.
    assert_eq!(field("v").and_then(|v| v.as_u64()), Some(2));
    // Every reader puts them back: the decoded event, `baton watch`.
    let end = system.stored_events(session).await?.pop().expect("an end");
    assert_eq!(end.output, Some(answer.into()));
    assert_eq!(
        end.context.map(|c| c.initial_query),
        Some(question.to_owned())
    );
    let watched = system.baton_stdout(&["watch", &session.to_string()])?;
    assert!(watched.contains(answer), "{watched}");
    // The next turn runs at its holder alone, in one hop: its `started`
    // event rides in its end, not beside it, and every reader restores it
    // just before the end, with the context the task came with.
    let follow_up = "When will I see the money on my card? I would like to know.";
    let turn = client(&url, "say", &[&context, follow_up])?;
    assert!(turn.to_string().contains(second), "{turn}");
    let session: uuid::Uuid = turn["id"].as_str().unwrap_or_default().parse()?;
    let raw = stream
        .get_last_raw_message_by_subject(&format!("baton.events.{session}"))
        .await?;
    let stored: Value = rmp_serde::from_slice(&raw.payload)?;
    assert_eq!(
        (stored["type"].as_str(), stored["v"].as_u64()),
        (Some("completed"), Some(2))
    );
    assert_eq!(stored["started"]["messages"], 1, "{stored}");
    let events = system.stored_events(session).await?;
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["started", "completed"],
        "{kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|kind| **kind == "started").count(), 1);
    let start = events[kinds.len() - 2]
        .context
        .as_deref()
        .expect("a context");
    assert_eq!(
        (start.messages.len(), start.messages[0].content.as_str()),
        (1, follow_up)
    );
    let history = system.client.history(session).await?;
    let read: Vec<&str> = history.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(read, kinds);
    Ok(())
}

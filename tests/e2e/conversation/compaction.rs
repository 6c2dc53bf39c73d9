//! A bounded history (`[llm.history]`): over 200 turns the model reads at
//! most its bound, the newest exchanges whole and a summary of the rest;
//! every compaction is one more message in the transcript, which keeps
//! every turn; and a fork at turn 150 asks the model byte for byte what
//! the conversation's own turn 151 asked.

use async_nats::jetstream;
use baton_proto::{Conversation, TranscriptEntry};
use baton_testkit::{FakeLlm, Scripted};
use serde_json::Value;

use crate::conversation::conversations::{Desk, desk_with};
use crate::util::System;

/// The bound on refunds' history, in messages.
const BOUND: usize = 12;

/// The text of turn `n`.
fn said(n: usize) -> String {
    format!("Message {n} of the customer.")
}

/// Whether a recorded request asks for a summary.
fn is_summary(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|text| text.starts_with("Summarise the conversation"))
}

/// The last user line of the transcript a summary request gives.
fn last_user_line(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let text = messages.last().map(|m| m["content"].clone());
    let text = text.as_ref().and_then(Value::as_str).unwrap_or_default();
    text.rsplit("\n\n")
        .find(|line| line.starts_with("user: "))
        .unwrap_or_default()
        .to_owned()
}

/// A stand-in whose summary of a transcript names the last user line in
/// it, and whose answer to a turn names the turn's message: both follow
/// from what is asked alone, as a replay needs.
fn refunds_model() -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::responding(|body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().map(|m| m["content"].clone());
        let last = last.as_ref().and_then(Value::as_str).unwrap_or_default();
        if is_summary(body) {
            Scripted::text(&format!("Covers up to [{}].", last_user_line(body)))
        } else {
            Scripted::text(&format!("Noted: {last}"))
        }
    })?)
}

/// Runs `baton chat --conversation ID` with `lines`, one turn each.
fn chat(system: &System, id: &str, lines: &[String]) -> anyhow::Result<String> {
    let input = lines.join("\n") + "\n";
    let (ok, stdout, stderr) =
        crate::conversation::chat::chat(system, &["--conversation", id], &input)?;
    anyhow::ensure!(ok, "baton chat failed: {stderr}");
    Ok(stdout)
}

/// The entries of conversation `id`'s transcript, in order.
async fn transcript(system: &System, id: &str) -> anyhow::Result<Vec<TranscriptEntry>> {
    let store = jetstream::new(system.nats.clone())
        .get_key_value("BATON_TRANSCRIPTS")
        .await?;
    let mut entries = Vec::new();
    for n in 1.. {
        let Some(bytes) = store.get(Conversation::entry_key(id, n)).await? else {
            break;
        };
        entries.push(rmp_serde::from_slice(&bytes)?);
    }
    Ok(entries)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_turns_stay_within_the_bound_and_a_fork_asks_the_same() -> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = refunds_model()?;
    let history = format!("[llm.history]\nmax_messages = {BOUND}\n");
    let desk = Desk {
        refunds_llm: &history,
        ..Desk::default()
    };
    let (mut system, _url, _dir) = desk_with(&triage, &refunds, desk, &[]).await?;
    let id = "long-1";
    let lines: Vec<String> = (1..=200).map(said).collect();
    let stdout = chat(&system, id, &lines)?;
    assert_eq!(stdout.lines().count(), 200, "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some(format!("Noted: {}", said(200)).as_str())
    );

    let asked = refunds.requests();
    let (summaries, turns): (Vec<_>, Vec<_>) = asked.iter().partition(|r| is_summary(&r.body));
    assert_eq!(turns.len(), 200);
    assert!(summaries.len() >= 20, "{} summaries", summaries.len());
    for (n, turn) in turns.iter().enumerate() {
        let messages = turn.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // The system prompt, then at most the bound.
        assert!(
            messages.len() <= BOUND + 1,
            "turn {}: {}",
            n + 1,
            messages.len()
        );
        // The turn's own message is last; the user messages before it are
        // the turns just before, in order, with nothing between missing.
        let users: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str())
            .collect();
        let expected: Vec<String> = (n + 2 - users.len()..=n + 1).map(said).collect();
        assert_eq!(users, expected, "turn {}", n + 1);
        // After the system prompt and a summary, if any, a whole exchange
        // begins: its user message comes first.
        let first = messages
            .iter()
            .skip(1)
            .find(|m| m["role"] != "system")
            .map(|m| m["role"].clone());
        assert_eq!(first, Some(Value::from("user")), "turn {}", n + 1);
    }
    // Turn 200 reads a summary covering what it no longer reads whole.
    let last = &turns[199].body["messages"];
    let summary = last[1]["content"].as_str().unwrap_or_default();
    assert!(summary.starts_with("Summary of the conversation"), "{last}");
    // Each summary after the first summarises the one before it too.
    for pair in summaries.windows(2) {
        let earlier = format!(
            "(summary of what came before) Covers up to [{}].",
            last_user_line(&pair[0].body)
        );
        let text = pair[1].body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default();
        assert!(
            text.starts_with(&earlier),
            "{earlier} does not begin {text}"
        );
    }

    // The transcript keeps every turn's message; each compaction is one
    // more entry, counting further than the one before.
    let entries = transcript(&system, id).await?;
    assert_eq!(entries.len(), 200);
    let mut users = Vec::new();
    let mut throughs = Vec::new();
    for entry in &entries {
        for message in &entry.messages {
            if let Some(compaction) = &message.compaction {
                assert_eq!(compaction.model.as_deref(), Some("stand-in"));
                throughs.push(compaction.through);
            } else if message.role == baton_proto::Role::User && !users.contains(&message.content) {
                users.push(message.content.clone());
            }
        }
    }
    assert_eq!(users, lines, "the transcript lost a turn");
    assert_eq!(throughs.len(), summaries.len());
    assert!(throughs.windows(2).all(|w| w[0] < w[1]), "{throughs:?}");
    // The worker counted them.
    let url = crate::operations::metrics::metrics_url(system.process("refunds").stderr())?;
    let samples = crate::operations::metrics::scrape(&url)?;
    let counted = crate::operations::metrics::value(
        &samples,
        "baton_conversation_compactions_total",
        &[("kind", "summarized")],
    );
    assert_eq!(counted, summaries.len() as f64);

    // A replay of a turn that compacted asks no model: the summary and the
    // answer come from the hop journal, and they are the same.
    let compacted = entries
        .iter()
        .rev()
        .find(|entry| entry.messages.iter().any(|m| m.compaction.is_some()))
        .map(|entry| entry.turn)
        .unwrap_or_default();
    let shown = system.baton_stdout(&["conversations", "show", id, "--json"])?;
    let shown: Value = serde_json::from_str(&shown)?;
    let turn = &shown["turns_listed"][compacted as usize - 1];
    let session = turn["session"].as_str().unwrap_or_default();
    let before = refunds.requests().len();
    let replayed = system.baton_stdout(&[
        "replay",
        session,
        "--wait",
        "--json",
        "--timeout-secs",
        "30",
    ])?;
    let end: Value = replayed
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_default();
    assert_eq!(end["type"], "completed", "{replayed}");
    assert_eq!(
        end["output"].as_str(),
        Some(format!("Noted: {}", said(compacted as usize)).as_str())
    );
    let extra: Vec<String> = refunds.requests()[before..]
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(extra.is_empty(), "the replay asked the model: {extra:#?}");

    // A fork at turn 150: its turn 151 asks exactly what turn 151 asked.
    let forked = ["conversations", "fork", id, "--at", "150", "--id", "long-2"];
    assert_eq!(system.baton_stdout(&forked)?, "long-2\n");
    let before = refunds.requests().len();
    chat(&system, "long-2", &lines[150..151])?;
    let again: Vec<_> = refunds.requests()[before..]
        .iter()
        .filter(|r| !is_summary(&r.body))
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(again, [turns[150].body.to_string()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_older_dropped_the_model_reads_the_newest_exchanges_and_nothing_is_summarised()
-> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = refunds_model()?;
    let desk = Desk {
        refunds_llm: "[llm.history]\nmax_messages = 6\nolder = \"drop\"\n",
        ..Desk::default()
    };
    let (mut system, _url, _dir) = desk_with(&triage, &refunds, desk, &[]).await?;
    let lines: Vec<String> = (1..=12).map(said).collect();
    chat(&system, "short-1", &lines)?;
    // One request per turn, none for a summary, each within the bound.
    let asked = refunds.requests();
    assert_eq!(asked.len(), 12);
    for (n, request) in asked.iter().enumerate() {
        assert!(!is_summary(&request.body), "request {n} asks for a summary");
        let messages = request.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(messages.len() <= 7, "turn {}: {}", n + 1, messages.len());
        assert_eq!(
            messages.iter().filter(|m| m["role"] == "system").count(),
            1,
            "turn {}: only the system prompt is a system message",
            n + 1
        );
    }
    // The last turn reads its own exchange and one or two before it (a
    // compaction keeps 3 messages of 6: then one more turn fits).
    let users: Vec<&str> = asked[11].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    let expected: Vec<String> = (13 - users.len()..=12).map(said).collect();
    assert!((2..=3).contains(&users.len()), "{users:?}");
    assert_eq!(users, expected);
    // What was dropped is marked in the transcript, with no model.
    let dropped: Vec<_> = transcript(&system, "short-1")
        .await?
        .into_iter()
        .flat_map(|entry| entry.messages)
        .filter_map(|message| message.compaction.map(|c| (c, message.content)))
        .collect();
    assert!(!dropped.is_empty());
    assert!(
        dropped
            .iter()
            .all(|(c, text)| c.model.is_none() && text.is_empty())
    );
    let url = crate::operations::metrics::metrics_url(system.process("refunds").stderr())?;
    let samples = crate::operations::metrics::scrape(&url)?;
    let counted = crate::operations::metrics::value(
        &samples,
        "baton_conversation_compactions_total",
        &[("kind", "dropped")],
    );
    assert_eq!(counted, dropped.len() as f64);
    Ok(())
}

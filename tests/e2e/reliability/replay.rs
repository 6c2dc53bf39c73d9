//! Replay and fork: a finished session run again as a new session, linked
//! to it, reusing the model answers and tool results it recorded in the hop
//! journal until the first input that changed; `baton diff` shows where two
//! sessions part; the console replays from a hop. The stand-in model counts
//! every call, and the order server logs every refund.

use std::time::Duration;

use baton_proto::{Envelope, EventType};
use baton_testkit::{FakeLlm, Scripted};

use crate::util::{System, agents, llm_table, session_in};

/// `front` hands off to `refund_llm`, which refunds through the stdio order
/// server (its refunds logged to the returned file).
async fn refund_system(
    llm: &FakeLlm,
) -> anyhow::Result<(System, tempfile::TempDir, std::path::PathBuf)> {
    refund_system_with(llm, &[]).await
}

/// [`refund_system`] with `flags` on both workers.
async fn refund_system_with(
    llm: &FakeLlm,
    flags: &[&str],
) -> anyhow::Result<(System, tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("refunds.jsonl");
    let table = llm_table(llm, "");
    let front = dir.path().join("front.toml");
    std::fs::write(
        &front,
        format!("name = \"front\"\nkind = \"llm\"\n\n[[handoffs]]\nto = \"refund_llm\"\n{table}"),
    )?;
    let refund = dir.path().join("refund_llm.toml");
    std::fs::write(
        &refund,
        format!(
            "name = \"refund_llm\"\nkind = \"llm\"\n{table}\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\n",
            crate::reliability::tools::orders_server()
        ),
    )?;
    let mut system = System::start().await?;
    for (label, spec) in [("front", &front), ("refund_llm", &refund)] {
        let spec = spec.to_string_lossy().into_owned();
        let mut args = vec!["worker", "--spec", &spec, "--no-registry"];
        args.extend_from_slice(flags);
        let mut command = system.baton(&args);
        command.env("ORDERS_LOG", &log);
        system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
        system
            .wait_log(label, "worker started", Duration::from_secs(30))
            .await?;
    }
    Ok((system, dir, log))
}

fn transfer() -> Scripted {
    Scripted::message(serde_json::json!({
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_t", "type": "function",
            "function": {"name": "transfer_to_refund_llm", "arguments": "{\"reason\": \"refund\"}"}}],
    }))
    .with_usage("stand-in", 40, 10)
}

fn refund_call() -> Scripted {
    Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123", "amount": 49.5}"#)])
        .with_usage("stand-in", 60, 15)
}

fn refunds(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

/// The last event stored for `session`, as written (its parts not put back).
async fn stored_end(system: &System, session: &str) -> anyhow::Result<serde_json::Value> {
    let raw = async_nats::jetstream::new(system.nats.clone())
        .get_stream("BATON_EVENTS")
        .await?
        .get_last_raw_message_by_subject(&format!("baton.events.{session}"))
        .await?;
    Ok(rmp_serde::from_slice(&raw.payload)?)
}

/// `baton send --to front --direct --wait TEXT`: its stdout.
fn sent_to_front(system: &System, text: &str) -> anyhow::Result<String> {
    let args = [
        "send",
        "--to",
        "front",
        "--direct",
        "--wait",
        "--timeout-secs",
        "30",
    ];
    system.baton_stdout(&[&args[..], &[text]].concat())
}

/// `baton replay SESSION FLAGS --wait --json`: its stdout.
fn replayed(system: &System, session: &str, flags: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["replay", session];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--wait", "--json", "--timeout-secs", "30"]);
    system.baton_stdout(&args)
}

/// The terminal event `baton … --wait --json` printed.
fn ended(stdout: &str) -> anyhow::Result<serde_json::Value> {
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("no JSON outcome in {stdout}"))?;
    Ok(serde_json::from_str(line)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_reuses_every_recorded_answer_and_a_fork_calls_again_from_what_changed()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        // The session: front hands off, refund_llm refunds, then answers.
        transfer(),
        refund_call(),
        Scripted::text("Refunded 49.5 to your card.").with_usage("stand-in", 80, 8),
        // From hop 2: refund_llm is asked again.
        Scripted::text("That order was refunded already.").with_usage("stand-in", 80, 7),
        // Tools called again: the refund's new result is new input.
        Scripted::text("Refunded once more.").with_usage("stand-in", 80, 4),
        // Another model: every hop is asked again.
        transfer(),
        Scripted::text("Done, with the other model.").with_usage("stand-in", 70, 6),
    ])?;
    let (system, _dir, log) = refund_system(&llm).await?;
    let sent = sent_to_front(&system, "Please refund order ABC-123.")?;
    let original = session_in(&sent)?.to_owned();
    assert_eq!(llm.requests().len(), 3, "{sent}");
    assert_eq!(refunds(&log), 1);

    // Unchanged but for a variable the models never see: 0 model calls,
    // 0 refunds, the same answer, the variable in the replay's context.
    let stdout = replayed(&system, &original, &["--set", "tier=\"gold\""])?;
    let end = ended(&stdout)?;
    assert_eq!(end["type"], "completed", "{end}");
    assert_eq!(end["output"], "Refunded 49.5 to your card.");
    assert_eq!(end["context"]["variables"]["tier"], "gold");
    assert_eq!(
        end["usage"]["input_tokens"].as_u64().unwrap_or(0),
        0,
        "{end}"
    );
    assert_eq!(
        llm.requests().len(),
        3,
        "an unchanged replay calls no model"
    );
    assert_eq!(refunds(&log), 1, "nor any tool");
    let replay = end["session"].as_str().unwrap_or_default().to_owned();
    assert_ne!(replay, original);
    // Its end says what it replays, so it counts as no live outcome; the
    // original's does not.
    assert_eq!(
        stored_end(&system, &replay).await?["replay_of"],
        original.as_str()
    );
    assert!(
        stored_end(&system, &original)
            .await?
            .get("replay_of")
            .is_none()
    );
    let started = system.stored_events(replay.parse()?).await?;
    let start = started
        .iter()
        .find_map(baton_proto::Start::from_event)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "the replay has no started event: {:?}",
                crate::util::kinds(&started)
            )
        })?;
    assert_eq!(
        start.replay_of.map(|s| s.to_string()),
        Some(original.clone())
    );

    let diff = system.baton_stdout(&["diff", &original, &replay])?;
    for part in [
        "path:    same: front -> refund_llm",
        "tools:   same: 2 calls",
        "answers: same",
        "outcome: same",
    ] {
        assert!(diff.contains(part), "{part:?} in {diff}");
    }
    assert!(
        diff.contains(&format!("replay:  same: one replays {original}")),
        "{diff}"
    );
    assert!(
        diff.contains("spent:   differ: 213 tokens (180 in, 33 out) | 0 tokens (0 in, 0 out)"),
        "{diff}"
    );

    // From hop 2: front's answer is reused, refund_llm is asked again.
    let stdout = replayed(&system, &original, &["--from", "2"])?;
    let forked = ended(&stdout)?;
    assert_eq!(forked["output"], "That order was refunded already.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 4, "only hop 2 called the model");
    assert_eq!(
        requests[3].body["messages"].as_array().map(Vec::len),
        requests[1].body["messages"].as_array().map(Vec::len)
    );
    assert_eq!(refunds(&log), 1);
    let fork = forked["session"].as_str().unwrap_or_default();
    let diff = system.baton_stdout(&["diff", &original, fork, "--exit-code"]);
    let err = diff.expect_err("the sessions differ: exit 1").to_string();
    assert!(err.contains("path:    same: front -> refund_llm"), "{err}");
    assert!(
        err.contains(r#"tools:   differ: at call 2: refund_order {"order_id": "ABC-123", "amount": 49.5} | (none)"#),
        "{err}"
    );

    // Tools called again: a second refund, whose new result changes what
    // refund_llm is asked next: one model call, not three.
    let stdout = replayed(&system, &original, &["--call-tools"])?;
    assert_eq!(ended(&stdout)?["output"], "Refunded once more.");
    assert_eq!(refunds(&log), 2);
    assert_eq!(llm.requests().len(), 5);

    // Another model: every hop asks it.
    let stdout = replayed(&system, &original, &["--model", "other-model"])?;
    let end = ended(&stdout)?;
    assert_eq!(end["output"], "Done, with the other model.");
    let requests = llm.requests();
    assert_eq!(requests.len(), 7);
    assert!(
        requests[5..]
            .iter()
            .all(|r| r.body["model"] == "other-model")
    );
    assert_eq!(refunds(&log), 2, "the model's new answers called no tool");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn replays_that_cannot_be_made_say_why_and_start_nothing() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![Scripted::text("One."), Scripted::text("Two.")])?;
    let table = llm_table(&llm, "");
    let (system, _dir) =
        crate::util::spec_workers(&[("solo", format!("name = \"solo\"\nkind = \"llm\"\n{table}"))])
            .await?;
    let fails = |args: &[&str]| -> anyhow::Result<String> {
        let output = tokio::task::block_in_place(|| system.baton(args).output())?;
        anyhow::ensure!(!output.status.success(), "baton {args:?} succeeded");
        Ok(String::from_utf8_lossy(&output.stderr).into_owned())
    };
    // A session whose task did not ask to be replayable.
    let events = system.run("solo", &Envelope::task("q")).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let plain = events[0].session.to_string();
    let err = fails(&["replay", &plain])?;
    assert!(
        err.contains("cannot be replayed") && err.contains("replayable"),
        "{err}"
    );
    let unknown = uuid::Uuid::new_v4().to_string();
    let err = fails(&["replay", &unknown])?;
    assert!(
        err.contains(&format!("no session {unknown} is stored")),
        "{err}"
    );

    let sent = system.baton_stdout(&["send", "--to", "solo", "--direct", "--wait", "q"])?;
    let session = session_in(&sent)?.to_owned();
    let err = fails(&["replay", &session, "--from", "3"])?;
    assert!(
        err.contains("--from 3: session") && err.contains("has hops 1 to 1"),
        "{err}"
    );
    let err = fails(&["replay", &session, "--from", "0"])?;
    assert!(err.contains("--from"), "{err}");
    let err = fails(&["replay", &session, "--set", "=gold"])?;
    assert!(err.contains("invalid --set \"=gold\""), "{err}");
    let err = fails(&["replay", "not-a-session"])?;
    assert!(err.contains("invalid session id"), "{err}");
    assert_eq!(llm.requests().len(), 2, "no replay called the model");
    let ended = system
        .client
        .wait(session.parse()?, Duration::from_secs(5))
        .await?;
    assert_eq!(agents(&ended.path), ["solo"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_replays_a_session_from_a_hop() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        transfer(),
        Scripted::text("Refunded.").with_usage("stand-in", 50, 3),
        Scripted::text("Refunded, again.").with_usage("stand-in", 50, 3),
    ])?;
    let (mut system, _dir, _log) = refund_system(&llm).await?;
    let sent = system.baton_stdout(&[
        "send",
        "--to",
        "front",
        "--direct",
        "--wait",
        "refund ABC-123",
    ])?;
    let original = session_in(&sent)?.to_owned();
    assert_eq!(llm.requests().len(), 2);
    let url = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let seen = crate::gateways::console::browser(&["replay_hop", &url, &original, "2"])?;
    assert_eq!(
        seen["hops"],
        serde_json::json!(["front", "refund_llm"]),
        "{seen}"
    );
    assert_eq!(seen["state"], "completed", "{seen}");
    assert_eq!(seen["replay_of"], format!("/sessions/{original}"), "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert_eq!(
        llm.requests().len(),
        3,
        "hop 1 was reused, hop 2 asked again"
    );
    let landed: uuid::Uuid = seen["landed"].as_str().unwrap_or_default().parse()?;
    let end = system.client.wait(landed, Duration::from_secs(10)).await?;
    assert_eq!(agents(&end.path), ["front", "refund_llm"]);
    assert_eq!(
        end.output,
        Some(baton_proto::Value::from("Refunded, again."))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn whole_events_for_older_readers_replay_at_no_cost_and_diff_as_kept_once_ones()
-> anyhow::Result<()> {
    let answer = "Refunded 49.5 to your card; it shows on your statement within five working days.";
    let llm = FakeLlm::start(vec![
        transfer(),
        refund_call(),
        Scripted::text(answer).with_usage("stand-in", 80, 8),
    ])?;
    let (system, _dir, log) = refund_system_with(&llm, &["--whole-events"]).await?;
    let question =
        "Please refund order ABC-123: the parcel arrived broken and I want my money back.";
    let sent = sent_to_front(&system, question)?;
    let original = session_in(&sent)?.to_owned();
    assert!(sent.contains(answer), "{sent}");
    // The end was stored whole, as version 1: its answer is its output.
    let stored = stored_end(&system, &original).await?;
    assert_eq!(
        (stored["v"].as_u64(), stored["output"].as_str()),
        (Some(1), Some(answer))
    );
    assert!(stored.get("refs").is_none(), "{stored}");
    let events = system.stored_events(original.parse()?).await?;
    assert_eq!(
        events.last().and_then(|end| end.output.clone()),
        Some(answer.into())
    );
    let started = (events.iter())
        .find(|event| event.kind == baton_proto::EventType::Started)
        .and_then(|event| event.context.clone())
        .map(|context| context.initial_query);
    assert_eq!(started.as_deref(), Some(question));
    // Replayed unchanged: no model call, no tool call, the same answer.
    let stdout = replayed(&system, &original, &[])?;
    let end = ended(&stdout)?;
    assert_eq!(end["output"], answer, "{end}");
    assert_eq!(
        llm.requests().len(),
        3,
        "an unchanged replay calls no model"
    );
    assert_eq!(refunds(&log), 1, "nor any tool");
    let replay = end["session"].as_str().unwrap_or_default().to_owned();
    let diff = system.baton_stdout(&["diff", &original, &replay])?;
    for part in ["answers: same", "outcome: same"] {
        assert!(diff.contains(part), "{part:?} in {diff}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_hop_session_whose_start_rides_in_its_end_replays_at_no_cost() -> anyhow::Result<()> {
    let answer = "Your order ABC-123 left the warehouse today and arrives on Friday morning.";
    let llm = FakeLlm::start(vec![Scripted::text(answer)])?;
    let table = llm_table(&llm, "");
    let (system, _dir) =
        crate::util::spec_workers(&[("solo", format!("name = \"solo\"\nkind = \"llm\"\n{table}"))])
            .await?;
    let question = "Where is my order ABC-123? It has not arrived, and it has been a week now.";
    let sent = system.baton_stdout(&["send", "--to", "solo", "--direct", "--wait", question])?;
    let original = session_in(&sent)?.to_owned();
    // The session's start is stored inside its end, not beside it.
    let stored = stored_end(&system, &original).await?;
    assert_eq!(
        (
            stored["type"].as_str(),
            stored["started"]["messages"].as_u64()
        ),
        (Some("completed"), Some(1)),
        "{stored}"
    );
    // Replayed from it, unchanged: no model call, the same answer.
    let end = ended(&replayed(&system, &original, &[])?)?;
    assert_eq!(end["output"], answer, "{end}");
    assert_eq!(
        llm.requests().len(),
        1,
        "an unchanged replay calls no model"
    );
    let replay = end["session"].as_str().unwrap_or_default().to_owned();
    let diff = system.baton_stdout(&["diff", &original, &replay])?;
    for part in ["answers: same", "outcome: same"] {
        assert!(diff.contains(part), "{part:?} in {diff}");
    }
    Ok(())
}

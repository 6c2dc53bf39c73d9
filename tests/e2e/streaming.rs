//! Answers as they are written: LLM agents ask the stand-in model to
//! stream, the pieces go out live as `delta` events, and `baton send
//! --wait` and `baton watch` print them in order, across a handoff, once
//! each even when a stream is cut and the call made again.

use std::time::Duration;

use baton_proto::{Delta, EventType};
use baton_testkit::{FakeLlm, Scripted};

use crate::util::{System, llm_table, session_in, spec_workers};

/// `first` (an LLM agent type) may hand off to `second` (another).
async fn two_agents(llm: &FakeLlm) -> anyhow::Result<(System, tempfile::TempDir)> {
    let table = llm_table(llm, "");
    spec_workers(&[
        (
            "first",
            format!("name = \"first\"\nkind = \"llm\"\n\n[[handoffs]]\nto = \"second\"\n{table}"),
        ),
        (
            "second",
            format!("name = \"second\"\nkind = \"llm\"\n{table}"),
        ),
    ])
    .await
}

/// `first` says something, then hands off; `second` answers.
fn handing_off() -> Vec<Scripted> {
    let pause = Duration::from_millis(20);
    vec![
        Scripted::message(serde_json::json!({
            "role": "assistant",
            "content": "Let me find someone who knows. ",
            "tool_calls": [{"id": "call_0", "type": "function",
                "function": {"name": "transfer_to_second", "arguments": "{\"reason\": \"knows more\"}"}}],
        }))
        .with_usage("stand-in", 20, 10)
        .chunks_every(pause),
        Scripted::text("The answer is forty two.")
            .with_usage("stand-in", 30, 6)
            .chunks_every(pause),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_stream_in_order_across_a_handoff() -> anyhow::Result<()> {
    let llm = FakeLlm::start(handing_off())?;
    let (system, _dir) = two_agents(&llm).await?;
    let args = ["send", "--to", "first", "--direct", "--wait", "a question"];
    let stdout = system.baton_stdout(&args)?;
    // The model was asked to stream, with its usage.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.body["stream"], true, "{}", request.body);
        assert_eq!(request.body["stream_options"]["include_usage"], true);
    }
    // The first answer as it was written, the handoff on its own line, the
    // second answer, then the outcome.
    let first = stdout
        .find("first: Let me find someone who knows.")
        .ok_or_else(|| anyhow::anyhow!("no streamed first answer in {stdout}"))?;
    let moved = stdout
        .find("↳ ")
        .filter(|at| stdout[*at..].starts_with("↳ ") && *at > first)
        .ok_or_else(|| anyhow::anyhow!("no handoff line after it in {stdout}"))?;
    assert!(
        stdout[moved..]
            .lines()
            .next()
            .unwrap_or_default()
            .contains("first handed off to second"),
        "{stdout}"
    );
    let second = stdout
        .find("second: The answer is forty two.")
        .filter(|at| *at > moved)
        .ok_or_else(|| anyhow::anyhow!("no streamed second answer after it in {stdout}"))?;
    let end = stdout
        .find("completed")
        .or_else(|| stdout.find("answer:"))
        .unwrap_or(usize::MAX);
    assert!(second < end, "{stdout}");
    // The usage the streams reported counts.
    assert!(
        stdout.contains("spent:  66 tokens (50 in, 16 out)\n"),
        "{stdout}"
    );

    // None of the pieces is stored.
    let session = session_in(&stdout)?;
    let history = system.client.history(session.parse()?).await?;
    assert!(history.iter().all(|e| e.kind != EventType::Delta));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_prints_the_pieces_of_a_live_answer_in_order() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::text("one two three four five six").chunks_every(Duration::from_millis(300)),
    ])?;
    let (system, _dir) = two_agents(&llm).await?;
    let session = system.baton_stdout(&["send", "--to", "second", "--direct", "a question"])?;
    let session = session.trim();
    let out = system.baton(&["watch", "--json", session]).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<baton_proto::Event> = stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let deltas: Vec<Delta> = events.iter().filter_map(Delta::of).collect();
    let text: String = deltas.iter().map(|d| d.text.as_str()).collect();
    // Joined after `watch` started: the tail of the answer, in order.
    assert!(!deltas.is_empty(), "{stdout}");
    assert!("one two three four five six".ends_with(&text), "{text:?}");
    let offsets: Vec<u64> = deltas.iter().map(|d| d.offset).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    assert!(deltas.iter().all(|d| d.step == 1));
    let last = events.last().map(|e| e.kind.clone());
    assert_eq!(last, Some(EventType::Completed));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_cut_mid_answer_is_asked_again_and_shown_once() -> anyhow::Result<()> {
    let answer = "The refund was issued today.";
    let llm = FakeLlm::start(vec![
        Scripted::text(answer).cut_after(3),
        Scripted::text(answer),
    ])?;
    let (system, _dir) = two_agents(&llm).await?;
    let stdout =
        system.baton_stdout(&["send", "--to", "second", "--direct", "--wait", "a question"])?;
    assert_eq!(llm.requests().len(), 2, "asked again after the cut");
    let streamed = stdout
        .lines()
        .find(|l| l.starts_with("second: "))
        .unwrap_or_default();
    assert_eq!(streamed, format!("second: {answer}"), "{stdout}");
    assert_eq!(
        stdout.matches("The refund was").count(),
        2,
        "the stream, then the outcome: {stdout}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_cannot_stream_is_read_whole_and_no_stream_asks_for_none()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::text("A plain answer.").plain(),
        Scripted::text("Another answer."),
    ])?;
    let (system, _dir) = two_agents(&llm).await?;
    let stdout = system.baton_stdout(&["send", "--to", "second", "--direct", "--wait", "q"])?;
    assert!(stdout.contains("A plain answer."), "{stdout}");
    assert!(!stdout.contains("second: "), "nothing streamed: {stdout}");
    let args = [
        "send",
        "--to",
        "second",
        "--direct",
        "--wait",
        "--no-stream",
        "q",
    ];
    let stdout = system.baton_stdout(&args)?;
    assert!(stdout.contains("Another answer."), "{stdout}");
    assert!(!stdout.contains("second: "), "{stdout}");
    let requests = llm.requests();
    assert_eq!(requests[0].body["stream"], true);
    assert!(
        requests[1].body.get("stream").is_none(),
        "{}",
        requests[1].body
    );
    Ok(())
}

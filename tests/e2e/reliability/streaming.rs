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

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_an_answer_growing_as_it_is_written() -> anyhow::Result<()> {
    // Long enough (about 7 s) that a browser slow to start on a loaded
    // machine still sees the answer at two lengths.
    let words = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen \
                 fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three \
                 twenty-four twenty-five twenty-six twenty-seven twenty-eight";
    let llm = FakeLlm::start(vec![
        Scripted::text(words).chunks_every(Duration::from_millis(250)),
    ])?;
    let table = llm_table(&llm, "");
    let (mut system, _dir) =
        spec_workers(&[("solo", format!("name = \"solo\"\nkind = \"llm\"\n{table}"))]).await?;
    let url = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let sent = system.baton_stdout(&["send", "--to", "solo", "--direct", "count"])?;
    let session = session_in(&sent)?.to_owned();
    let seen = crate::gateways::console::browser(&["growing", &url, &session])?;
    assert_eq!(seen["state"], "completed", "{seen}");
    assert_eq!(seen["answer"], words, "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    // Seen at two lengths at least, each the start of the answer, longer each time.
    let samples: Vec<&str> = seen["samples"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|sample| sample.as_str())
        .collect();
    assert!(samples.len() >= 2, "{seen}");
    assert!(
        samples.iter().all(|sample| words.starts_with(sample)),
        "{seen}"
    );
    assert!(
        samples.windows(2).all(|pair| pair[0].len() < pair[1].len()),
        "{seen}"
    );
    Ok(())
}

/// The pieces of an answer, put back together.
fn joined<'a>(pieces: impl Iterator<Item = &'a str>) -> String {
    pieces.collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_and_a2a_gateways_relay_answers_as_they_are_written() -> anyhow::Result<()> {
    let words = "Refunds are accepted within thirty days of delivery.";
    let pause = Duration::from_millis(10);
    let llm = FakeLlm::start(vec![
        Scripted::text(words).chunks_every(pause),
        Scripted::text(words).chunks_every(pause),
    ])?;
    let table = llm_table(&llm, "");
    let (mut system, _dir) =
        spec_workers(&[("solo", format!("name = \"solo\"\nkind = \"llm\"\n{table}"))]).await?;
    // The gateways start sessions through the ingress.
    system.router(&["--no-registry"]).await?;
    let args = ["mcp", "serve", "--http", "127.0.0.1:0", "--agents", "solo"];
    system.spawn("mcp", &args, "MCP server listening").await?;
    let mcp = system.logged_url("mcp")?;
    let args = ["a2a", "serve", "--listen", "127.0.0.1:0"];
    system.spawn("a2a", &args, "A2A server listening").await?;
    let a2a = system.logged_url("a2a")?;

    // MCP (the official Python SDK): the pieces come as progress messages,
    // before the result, and make the answer once each.
    let called =
        crate::util::python_json("mcp_client.py", "mcp", &["progress", &mcp, "solo", "q"])?;
    assert_eq!(called["text"], serde_json::json!([words]), "{called}");
    let progress: Vec<&str> = called["progress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str())
        .collect();
    let pieces: Vec<&str> = progress
        .iter()
        .filter_map(|p| p.strip_prefix("delta solo: "))
        .collect();
    assert!(pieces.len() > 3, "{called}");
    assert_eq!(joined(pieces.into_iter()), words, "{called}");
    assert_eq!(llm.requests()[0].body["stream"], true);

    // A2A message/stream (the official Python SDK): appended artifact
    // updates of one artifact, named after the agent, then the answer.
    let streamed =
        crate::util::python_json("a2a_client.py", "a2a", &[&a2a, "stream", "solo", "q"])?;
    let events = streamed["events"].as_array().cloned().unwrap_or_default();
    let drafts: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["kind"] == "artifact" && e["name"] == "solo")
        .collect();
    assert!(drafts.len() > 3, "{streamed}");
    assert_eq!(drafts[0]["append"], false, "{streamed}");
    assert!(
        drafts[1..].iter().all(|d| d["append"] == true),
        "{streamed}"
    );
    assert!(
        drafts.iter().all(|d| d["id"] == drafts[0]["id"]),
        "{streamed}"
    );
    let text = joined(drafts.iter().filter_map(|d| d["text"][0].as_str()));
    assert_eq!(text, words, "{streamed}");
    let n = events.len();
    assert_eq!(events[n - 2]["name"], "answer", "{streamed}");
    assert_eq!(
        events[n - 2]["text"],
        serde_json::json!([words]),
        "{streamed}"
    );
    assert_eq!(events[n - 1]["state"], "TASK_STATE_COMPLETED", "{streamed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn under_the_client_permissions_every_piece_is_relayed_by_the_router() -> anyhow::Result<()> {
    use crate::operations::permissions::{as_user, generated_config, run_as};
    let words: Vec<String> = (1..=60).map(|n| format!("w{n}")).collect();
    let answer = words.join(" ");
    let llm = FakeLlm::start(vec![
        Scripted::text(&answer).chunks_every(Duration::from_millis(1)),
    ])?;
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("solo", &["worker", "solo"]),
        ("client", &["client"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--default-agent", "solo", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("solo.toml");
    let table = llm_table(&llm, "");
    std::fs::write(&spec, format!("name = \"solo\"\nkind = \"llm\"\n{table}"))?;
    let spec = spec.to_string_lossy().into_owned();
    let solo = as_user("solo");
    let mut args: Vec<&str> = solo.iter().map(String::as_str).collect();
    args.extend(["worker", "--spec", &spec, "--no-registry"]);
    system.spawn("solo", &args, "worker started").await?;

    let sent = run_as(&system, "client", &["send", "--wait", "count"])?;
    let stdout = String::from_utf8_lossy(&sent.stdout);
    assert!(
        sent.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // The answer as it was written, every piece once, then the outcome.
    let streamed = stdout
        .lines()
        .find(|line| line.starts_with("solo: "))
        .ok_or_else(|| anyhow::anyhow!("nothing streamed: {stdout}"))?;
    assert_eq!(streamed.trim_end(), format!("solo: {answer}"), "{stdout}");
    assert!(stdout.contains(&format!("answer: {answer}")), "{stdout}");
    Ok(())
}

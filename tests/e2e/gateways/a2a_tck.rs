//! `baton a2a serve` with the examples/a2a-tck agents, driven by the
//! official A2A Python SDK on both bindings (JSON-RPC and HTTP+JSON), at
//! the ingress and at `/agents/tck/` (trailing slash): what the A2A TCK
//! checks, so CI covers it without the TCK. Errors carry their ErrorInfo
//! and the spec's codes, the card is cached, versions are honoured, and an
//! exec agent answers with text, files, data, chunks, a direct message, a
//! rejection, and a question; the message's id, metadata and referenced
//! tasks reach it; contexts and tokens work the same on both bindings.

use std::time::Duration;

use serde_json::{Value, json};

use crate::util::{System, example, wants};

const TOKEN: &str = "tck-s3cret";

/// The registry, `baton router --default-agent tck`, the example's spec
/// (its program noting each run's messageId in `runs`), and the gateway
/// with a token.
async fn system(runs: &std::path::Path) -> anyhow::Result<(System, String)> {
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system.router(&["--default-agent", "tck"]).await?;
    let spec = example("a2a-tck/tck.toml").to_string_lossy().into_owned();
    let mut worker = system.baton(&["worker", "--spec", &spec, "--instance", "tck"]);
    worker.env("TCK_RUNS", runs);
    system.adopt("tck", baton_testkit::ChildProcess::spawn(worker, "tck")?);
    system
        .wait_log("tck", "worker started", Duration::from_secs(30))
        .await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |a| {
            a.candidates.len() == 1
        })
        .await?;
    let mut command = system.baton(&["a2a", "serve", "--listen", "127.0.0.1:0"]);
    command.env("BATON_A2A_TOKEN", TOKEN);
    system.adopt("a2a", baton_testkit::ChildProcess::spawn(command, "a2a")?);
    system
        .wait_log("a2a", "A2A server listening", Duration::from_secs(30))
        .await?;
    let url = system.logged_url("a2a")?;
    Ok((system, url))
}

/// Runs `scripts/a2a_conformance.py URL BINDING` with the token.
fn conformance(url: &str, binding: &str) -> anyhow::Result<Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/scripts/a2a_conformance.py");
    let output = tokio::task::block_in_place(|| {
        std::process::Command::new("python3")
            .arg(script)
            .args([url, binding])
            .env("BATON_A2A_TOKEN", TOKEN)
            .output()
    })?;
    anyhow::ensure!(
        output.status.success(),
        "a2a_conformance.py {url} {binding} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn error_info(details: &Value, reason: &str) {
    assert_eq!(
        details,
        &json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                 "reason": reason, "domain": "a2a-protocol.org"}]),
        "{reason}"
    );
}

/// What one binding at one base saw of cards and errors.
fn check_raw(seen: &Value, rest: bool) {
    let raw = &seen["raw"];
    let card = &raw["card"];
    assert_eq!(card["cache_control"], "public, max-age=60", "{card}");
    assert!(
        card["etag"].as_str().is_some_and(|e| e.starts_with('"')),
        "{card}"
    );
    assert_eq!(card["conditional"], 304, "{card}");
    assert_eq!(card["bindings"], json!(["JSONRPC", "HTTP+JSON"]), "{card}");
    let (not_found, content_type, version) = if rest {
        (json!(404), json!(415), json!(400))
    } else {
        (json!(-32001), json!(-32005), json!(-32009))
    };
    assert_eq!(raw["not_found"]["code"], not_found, "{raw}");
    error_info(&raw["not_found"]["data"], "TASK_NOT_FOUND");
    assert_eq!(raw["content_type"], content_type, "{raw}");
    assert_eq!(raw["version"]["code"], version, "{raw}");
    error_info(&raw["version"]["data"], "VERSION_NOT_SUPPORTED");
    assert_eq!(raw["anonymous"], 401, "{raw}");
}

/// What one binding at one base saw of the agent's answers.
fn check_answers(seen: &Value) {
    // A text answer is a text part; files, URLs and data are their parts.
    let part = |key: &str| seen[key]["task"]["artifacts"][0]["parts"][0].clone();
    assert_eq!(part("complete"), json!({"text": "Hello from TCK"}));
    assert_eq!(part("text"), json!({"text": "Generated text content"}));
    assert_eq!(
        part("file"),
        json!({"raw": "dGNr", "filename": "output.txt", "mediaType": "text/plain"})
    );
    assert_eq!(part("file-url")["url"], "https://example.com/output.txt");
    // Through protobuf's Struct, numbers are doubles.
    assert_eq!(
        part("data"),
        json!({"data": {"key": "value", "count": 42.0}})
    );
    // A direct message, not a task; a rejection.
    assert_eq!(
        seen["direct"]["message"]["parts"],
        json!([{"text": "Direct message response"}]),
        "{}",
        seen["direct"]
    );
    assert!(seen["direct"].get("task").is_none());
    assert_eq!(
        seen["reject"]["task"]["status"]["state"],
        "TASK_STATE_REJECTED"
    );
    check_chunks(&seen["chunked"]);
}

/// Chunks stream in order, appended, the last one marked, then completed.
fn check_chunks(chunked: &Value) {
    let chunks: Vec<(Value, Value, Value)> = chunked
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.get("artifactUpdate"))
        .map(|u| {
            (
                u["artifact"]["parts"][0]["text"].clone(),
                u["append"].clone(),
                u["lastChunk"].clone(),
            )
        })
        .collect();
    assert_eq!(
        chunks,
        [
            (json!("chunk-1 "), json!(true), Value::Null),
            (json!("chunk-2"), json!(true), json!(true))
        ],
        "{}",
        chunked
    );
    let events = chunked.as_array().cloned().unwrap_or_default();
    assert_eq!(
        events
            .last()
            .map(|e| e["statusUpdate"]["status"]["state"].clone()),
        Some(json!("TASK_STATE_COMPLETED"))
    );
}

/// What reached the agent, contexts, and a question cancelled.
fn check_turns(seen: &Value) {
    // What reached the agent.
    let echoed = &seen["echo"]["answer"]["task"]["artifacts"][0]["parts"][0]["data"];
    assert_eq!(echoed["message_id"], seen["echo"]["sent"], "{echoed}");
    assert_eq!(echoed["metadata"], json!({"locale": "fr"}), "{echoed}");
    assert_eq!(
        echoed["reference_task_ids"],
        json!([seen["complete"]["task"]["id"]]),
        "{echoed}"
    );
    // A file of any type reaches the agent as it was sent.
    assert_eq!(
        echoed["files"],
        json!([{"raw": "dGNr", "filename": "in.txt", "mediaType": "application/x-unsupported-tck-type"}]),
        "{echoed}"
    );
    // One context, two turns, both listed; history trimmed on request.
    let context = &seen["context"];
    assert_eq!(context["contexts"][0], context["contexts"][1], "{context}");
    assert_eq!(context["listed"], 2, "{context}");
    assert_eq!(context["history0"], 0, "{context}");
    // A question, cancelled; then it cannot be cancelled again.
    let input = &seen["input"];
    assert_eq!(input["asked"], "TASK_STATE_INPUT_REQUIRED", "{input}");
    assert_eq!(input["cancelled"], "TASK_STATE_CANCELED", "{input}");
    assert!(
        input["again"]
            .as_str()
            .is_some_and(|e| e.contains("NotCancelable")),
        "{input}"
    );
    assert!(
        input["unknown"]
            .as_str()
            .is_some_and(|e| e.contains("NotFound")),
        "{input}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tck_example_conforms_on_both_bindings_at_the_ingress_and_the_agent()
-> anyhow::Result<()> {
    let runs = tempfile::tempdir()?;
    let runs = runs.path().join("runs");
    let (_system, url) = system(&runs).await?;
    let agent = format!("{url}/agents/tck/");
    for (base, binding) in [
        (url.as_str(), "JSONRPC"),
        (url.as_str(), "HTTP+JSON"),
        (agent.as_str(), "JSONRPC"),
        (agent.as_str(), "HTTP+JSON"),
    ] {
        let seen = conformance(base, binding)?;
        check_raw(&seen, binding == "HTTP+JSON");
        check_answers(&seen);
        check_turns(&seen);
        check_asked(&seen, &runs)?;
    }
    Ok(())
}

/// The exec agent asked twice on one task and completed after the second
/// answer: its program ran three times, and the task's history holds each
/// message, question and answer in order (the answer is its artifact).
fn check_asked(seen: &Value, runs: &std::path::Path) -> anyhow::Result<()> {
    let asked = &seen["ask"];
    assert_eq!(
        asked["states"],
        json!([
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_COMPLETED"
        ]),
        "{asked}"
    );
    assert_eq!(asked["same_task"], true, "{asked}");
    let mark = asked["mark"].as_str().unwrap_or("none");
    let ran = std::fs::read_to_string(runs)?;
    let ran: Vec<&str> = ran.lines().filter(|id| id.contains(mark)).collect();
    assert_eq!(ran.len(), 3, "{ran:?}");
    assert!(ran[2].starts_with("tck-complete-task"), "{ran:?}");
    assert_eq!(
        asked["history"],
        json!([
            "first",
            "The TCK asks for input.",
            "TCK history message 1",
            "The TCK asks for input.",
            "TCK history message 2"
        ]),
        "{asked}"
    );
    Ok(())
}

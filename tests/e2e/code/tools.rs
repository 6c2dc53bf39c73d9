//! The worker's model and tools for a Python agent: `ctx.model` and
//! `ctx.tool` through the same code as an LLM agent's, with the stand-in
//! model counting its requests and the order server logging each refund.

use std::time::Duration;

use baton_proto::EventType;
use baton_testkit::{FakeLlm, Scripted};

use super::{Coder, llm_table, output};
use crate::util::kinds;

/// The model's three answers: look the order up, refund it, say so.
fn script() -> Vec<Scripted> {
    vec![
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123", "amount": 49.5}"#)]),
        Scripted::text("Your refund of 49.5 is on its way."),
    ]
}

/// `coder` in mode `tools`, on the stand-in model and the stdio order
/// server (its refunds logged to the returned file); `mcp` goes in the
/// `[[mcp]]` table.
async fn refunder(llm: &FakeLlm, mcp: &str) -> anyhow::Result<(Coder, std::path::PathBuf)> {
    let server = crate::reliability::tools::orders_server();
    let mcp = format!("\n[[mcp]]\ncommand = [\"python3\", {server:?}]\n{mcp}\n");
    let extra = llm_table(llm, &mcp);
    let t = Coder::start("tools", &[], &extra).await?;
    let log = t.dir.path().join("refunds.jsonl");
    Ok((t, log))
}

impl Coder {
    /// Starts a worker of `coder` as `label`, its order server logging
    /// refunds to `log` after `delay_s` seconds each.
    async fn refund_worker(
        &mut self,
        label: &str,
        log: &std::path::Path,
        delay_s: &str,
    ) -> anyhow::Result<()> {
        let spec = self.spec.to_string_lossy().into_owned();
        let mut command = self
            .system
            .baton(&["worker", "--spec", &spec, "--no-registry"]);
        command
            .env("ORDERS_LOG", log)
            .env("ORDERS_DELAY_S", delay_s);
        let process = baton_testkit::ChildProcess::spawn(command, label)?;
        self.system.adopt(label, process);
        self.system
            .wait_log(label, "worker started", Duration::from_secs(30))
            .await
    }
}

fn refunds(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_tool_loop_uses_the_workers_model_and_tools_and_a_replay_calls_neither()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (mut t, log) = refunder(&llm, "").await?;
    t.refund_worker("w1", &log, "0").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let (events, end) = t.completed(&task).await?;
    let end = &end;
    assert_eq!(output(end), "Your refund of 49.5 is on its way.");
    assert_eq!(refunds(&log), 1);

    // The model was offered the server's tools as an LLM agent's are, saw
    // the conversation as chat messages, and each tool's result.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let offered: Vec<&str> = (requests[0].body["tools"].as_array().into_iter().flatten())
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert_eq!(offered, ["get_order", "refund_order"]);
    assert_eq!(requests[0].body["model"], "stand-in");
    let first = requests[0].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        first.last().map(|m| m["content"].clone()),
        Some("Please refund order ABC-123.".into())
    );
    let third = requests[2].body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let result = third.last().cloned().unwrap_or_default();
    assert_eq!(result["role"], "tool", "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap_or_default()
            .contains("refund R-ABC-123"),
        "{result}"
    );
    // The worker recorded both calls as an LLM agent's.
    let called = events
        .iter()
        .filter(|e| e.kind == EventType::ToolCalled)
        .count();
    assert_eq!(called, 2, "{:?}", kinds(&events));

    // A replay runs the handler again, at zero model and zero tool calls.
    let session = task.session.to_string();
    let replayed = t.baton(&[
        "replay",
        &session,
        "--wait",
        "--json",
        "--timeout-secs",
        "30",
    ])?;
    let last = replayed
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_default();
    let ended: serde_json::Value = serde_json::from_str(last)?;
    assert_eq!(ended["type"], "completed", "{replayed}");
    assert_eq!(
        ended["output"], "Your refund of 49.5 is on its way.",
        "{replayed}"
    );
    assert_eq!((llm.requests().len(), refunds(&log)), (3, 1));
    Ok(())
}

/// Kills the worker (`worker`) or the program while the order server makes
/// a refund: the call goes to a person, who says it happened; it is not
/// made again, and no recorded answer is asked again.
async fn killed_mid_write(worker: bool) -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (mut t, log) = refunder(&llm, "").await?;
    t.refund_worker("w1", &log, "2").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    baton_testkit::eventually(Duration::from_secs(30), || {
        let asked = llm.requests().len();
        std::future::ready(if asked >= 2 {
            Ok(())
        } else {
            Err(format!("{asked} requests"))
        })
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    if worker {
        t.system.process("w1").kill9();
    } else {
        t.kill_program()?;
    }
    // The server finishes the refund it was making.
    baton_testkit::eventually(Duration::from_secs(10), || {
        std::future::ready(if refunds(&log) == 1 {
            Ok(())
        } else {
            Err("no refund yet")
        })
    })
    .await?;
    if worker {
        t.refund_worker("w2", &log, "0").await?;
    }
    let entry = t.entry("tool_outcome_unknown").await?;
    assert_eq!(entry["tool"], "refund_order", "{entry}");
    assert_eq!(
        entry["arguments"],
        serde_json::json!({"order_id": "ABC-123", "amount": 49.5})
    );
    let id = entry["id"].as_str().unwrap_or_default().to_owned();
    t.baton(&[
        "inbox",
        "resolve",
        &id,
        "--happened",
        "--result",
        "refund R-1 made",
    ])?;
    t.completed(&task).await?;
    assert_eq!((refunds(&log), llm.requests().len()), (1, 3));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_write_sends_the_call_to_a_person_and_it_is_made_once()
-> anyhow::Result<()> {
    killed_mid_write(true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_killed_mid_write_sends_the_call_to_a_person_and_it_is_made_once()
-> anyhow::Result<()> {
    killed_mid_write(false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_that_needs_approval_waits_for_a_person_and_is_made_once() -> anyhow::Result<()> {
    let llm = FakeLlm::start(script())?;
    let (mut t, log) = refunder(&llm, "approve = [\"refund_order\"]").await?;
    t.refund_worker("w1", &log, "0").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let entry = t.entry("approval_required").await?;
    assert_eq!(entry["tool"], "refund_order", "{entry}");
    assert_eq!(refunds(&log), 0, "not before the approval");
    let id = entry["id"].as_str().unwrap_or_default().to_owned();
    t.baton(&["inbox", "approve", &id])?;
    t.completed(&task).await?;
    assert_eq!((refunds(&log), llm.requests().len()), (1, 3));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_call_without_an_llm_table_fails_the_hop_naming_the_section() -> anyhow::Result<()>
{
    let mut t = Coder::start("tools", &[], "").await?;
    t.worker("w1").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Failed, "{:?}", kinds(&events));
    let detail = end.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("ctx.model needs an [llm] table"),
        "{detail}"
    );
    assert!(
        !events.iter().any(|e| e.kind == EventType::Retrying),
        "{:?}",
        kinds(&events)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agents_model_answer_streams_to_the_caller_as_it_is_written() -> anyhow::Result<()>
{
    let llm = FakeLlm::start(vec![
        Scripted::text("The answer is forty two.")
            .with_usage("stand-in", 30, 6)
            .chunks_every(Duration::from_millis(20)),
    ])?;
    let extra = llm_table(&llm, "");
    let mut t = Coder::start("tools", &[], &extra).await?;
    t.worker("w1").await?;
    let stdout = t.baton(&["send", "--to", "coder", "--direct", "--wait", "a question"])?;
    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["stream"], true, "{}", requests[0].body);
    assert!(
        requests[0].body.get("tools").is_none(),
        "no tools offered: {}",
        requests[0].body
    );
    assert!(
        stdout.contains("coder: The answer is forty two."),
        "{stdout}"
    );
    assert!(
        stdout.contains("spent:  36 tokens (30 in, 6 out)\n"),
        "{stdout}"
    );
    Ok(())
}

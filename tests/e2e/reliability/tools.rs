//! LLM agents that call MCP tools: the order server of `examples/mcp`
//! (the official MCP Python SDK), over stdio and over streamable HTTP with
//! a token, driven by the scripted model stand-in.

use std::time::Duration;

use baton_proto::{Envelope, EventType};
use baton_testkit::{FakeLlm, Scripted};

use crate::util::{System, agents, kinds};

/// A spec for an LLM refund agent with `mcp` as its `[[mcp]]` table(s).
pub(crate) fn refund_spec(
    dir: &std::path::Path,
    llm: &FakeLlm,
    extra: &str,
) -> anyhow::Result<String> {
    let spec = dir.join("refund_llm.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "refund_llm"
kind = "llm"
timeout_ms = 20000
fallback = "human"

[llm]
base_url = "{}"
model = "test-model"
system_prompt = "You handle refunds. Look the order up before you refund it."
{extra}"#,
            llm.url()
        ),
    )?;
    Ok(spec.to_string_lossy().into_owned())
}

pub(crate) fn orders_server() -> String {
    crate::util::example("mcp/orders.py")
        .to_string_lossy()
        .into_owned()
}

/// Starts the spec's worker with `env`, and waits until it is ready.
async fn start(system: &mut System, spec: &str, env: &[(&str, &str)]) -> anyhow::Result<()> {
    worker(system, "refund_llm", spec, &[], env).await
}

/// Starts the refund agent of `spec` as process `label`, with `flags` after
/// the worker's own and `env`, and waits until it is ready.
async fn worker(
    system: &mut System,
    label: &str,
    spec: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<()> {
    let mut args = vec!["worker", "--spec", spec, "--no-registry"];
    args.extend_from_slice(flags);
    let mut command = system.baton(&args);
    command.envs(env.iter().copied());
    system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
    system
        .wait_log(label, "worker started", Duration::from_secs(30))
        .await
}

/// A system with the refund agent on the stdio order server, whose
/// refunds go to the returned log; `extra` goes in `[llm]`.
async fn on_stdio(
    llm: &FakeLlm,
    extra: &str,
) -> anyhow::Result<(System, tempfile::TempDir, std::path::PathBuf)> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("refunds.jsonl");
    let mcp = format!(
        "{extra}\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\n",
        orders_server()
    );
    let spec = refund_spec(dir.path(), llm, &mcp)?;
    let mut system = System::start().await?;
    start(
        &mut system,
        &spec,
        &[("ORDERS_LOG", &log.to_string_lossy())],
    )
    .await?;
    Ok((system, dir, log))
}

/// Runs a task with `text` on the refund agent, and fails unless it completes.
async fn completed(system: &System, text: &str) -> anyhow::Result<Vec<baton_proto::Event>> {
    let events = system.run("refund_llm", &Envelope::task(text)).await?;
    let end = events.last().map(|e| e.kind.clone());
    anyhow::ensure!(end == Some(EventType::Completed), "{:?}", kinds(&events));
    Ok(events)
}

/// The refunds the order server made: one JSON line each.
fn refunds(log: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_agent_looks_up_and_refunds_an_order_through_a_stdio_mcp_server()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123", "amount": 49.5}"#)]),
        Scripted::text("Your refund of 49.5 is on its way."),
    ])?;
    let (system, _dir, log) = on_stdio(&llm, "").await?;
    let task = Envelope::task("Please refund order ABC-123.");
    let events = system.run("refund_llm", &task).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(agents(&done.path), ["refund_llm"]);

    // The model was offered the server's tools, with their schemas, beside
    // nothing else; it saw each result before its next answer.
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert_eq!(offered, ["get_order", "refund_order"]);
    let refund_schema = requests[0].body["tools"][1]["function"]["parameters"].clone();
    assert_eq!(
        refund_schema["required"],
        serde_json::json!(["order_id", "amount"])
    );
    let second = requests[1].body["messages"].as_array().unwrap();
    let looked_up = second.last().unwrap();
    assert_eq!(looked_up["role"], "tool");
    assert!(
        looked_up["content"]
            .as_str()
            .unwrap_or_default()
            .contains("kettle"),
        "{looked_up}"
    );
    let third = requests[2].body["messages"].as_array().unwrap();
    assert!(
        third.last().unwrap()["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with("refund R-ABC-123"),
        "{third:?}"
    );

    // Each call is a tool_called event of the session, in order.
    let stored = system.stored_events(task.session).await?;
    let calls: Vec<String> = stored
        .iter()
        .filter(|e| e.kind == EventType::ToolCalled)
        .map(|e| e.detail.clone().unwrap_or_default())
        .collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls[0].starts_with("get_order ok in ") && calls[1].starts_with("refund_order ok in "),
        "{calls:?}"
    );

    // One refund, carrying an idempotency key from the envelope and step.
    let made = refunds(&log);
    assert_eq!(made.len(), 1, "{made:?}");
    let key = made[0]["key"].as_str().unwrap_or_default();
    assert!(key.starts_with(&task.id.to_string()), "{key}");

    // The calls and results stay in the session's conversation.
    let context = done.context.as_ref().expect("the ending context");
    let texts: Vec<&str> = context
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect();
    assert!(texts.iter().any(|t| t.contains("kettle")), "{texts:?}");
    assert!(
        texts.iter().any(|t| t.starts_with("refund R-ABC-123")),
        "{texts:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_errors_invented_names_and_bad_arguments_go_back_to_the_model() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        // Arguments that do not match the schema: told once, nothing called.
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123"}"#)]),
        // The server says isError: the model reads it.
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "NOPE"}"#)]),
        Scripted::text("That order does not exist."),
        // The next session: a tool the model invents.
        Scripted::tool_calls(&[("cancel_everything", "{}")]),
        Scripted::text("I cannot do that."),
        // The next: a tool and a handoff in one turn.
        Scripted::tool_calls(&[
            ("get_order", r#"{"order_id": "ABC-123"}"#),
            ("transfer_to_human", "{}"),
        ]),
        Scripted::text("Let me look first."),
    ])?;
    let (system, _dir, log) = on_stdio(&llm, "").await?;
    completed(&system, "refund NOPE").await?;
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let told = requests[1].body["messages"].as_array().unwrap();
    let told = told.last().unwrap()["content"].as_str().unwrap_or_default();
    assert!(
        told.contains("do not match refund_order's schema") && told.contains("amount"),
        "{told}"
    );
    let failed = requests[2].body["messages"].as_array().unwrap();
    let failed = failed.last().unwrap()["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        failed.starts_with("error:") && failed.contains("NOPE"),
        "{failed}"
    );
    completed(&system, "cancel it all").await?;
    let requests = llm.requests();
    assert_eq!(requests.len(), 5);
    let told = requests[4].body["messages"].as_array().unwrap();
    let told = told.last().unwrap()["content"].as_str().unwrap_or_default();
    assert!(
        told.contains("there is no tool \"cancel_everything\"") && told.contains("refund_order"),
        "{told}"
    );
    completed(&system, "look and hand off").await?;
    let requests = llm.requests();
    assert_eq!(requests.len(), 7);
    let told = requests[6].body["messages"].as_array().unwrap();
    let told = told.last().unwrap()["content"].as_str().unwrap_or_default();
    assert!(told.contains("call tools in a turn of their own"), "{told}");
    assert!(refunds(&log).is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_past_max_steps_goes_to_the_fallback_with_max_steps() -> anyhow::Result<()> {
    let call = Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]);
    let llm = FakeLlm::start(vec![call.clone(); 10])?;
    let (mut system, _dir, _log) = on_stdio(&llm, "max_steps = 4").await?;
    system.relay("human", "human", &[]).await?;
    let events = system.run("refund_llm", &Envelope::task("loop")).await?;
    let done = events.last().unwrap();
    assert_eq!(done.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(agents(&done.path), ["refund_llm", "human"]);
    assert_eq!(
        done.path[1].reason.as_ref().map(|r| r.as_str()),
        Some("max_steps")
    );
    // Steps 1 and 3 are model calls, 2 and 4 tool calls: two model calls.
    assert_eq!(llm.requests().len(), 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamable_http_server_with_a_token_serves_the_same_tools() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("refunds.jsonl");
    let mut server = std::process::Command::new("python3");
    server
        .arg(orders_server())
        .args(["--http", &port.to_string(), "--token", "order-secret"])
        .env("ORDERS_LOG", &log);
    let _server = baton_testkit::ChildProcess::spawn(server, "orders")?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    baton_testkit::eventually(Duration::from_secs(20), || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).map(drop)
    })
    .await?;
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[(
            "shop_refund_order",
            r#"{"order_id": "XYZ-9", "amount": 20}"#,
        )]),
        Scripted::text("Refunded."),
    ])?;
    let spec = refund_spec(
        dir.path(),
        &llm,
        &format!(
            "\n[[mcp]]\nurl = \"{url}\"\ntoken_env = \"ORDERS_TOKEN\"\nprefix = \"shop_\"\ntools = [\"refund_order\"]\n"
        ),
    )?;
    let mut system = System::start().await?;
    start(&mut system, &spec, &[("ORDERS_TOKEN", "order-secret")]).await?;
    completed(&system, "refund XYZ-9").await?;
    let offered: Vec<String> = llm.requests()[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(offered, ["shop_refund_order"]);
    assert_eq!(refunds(&log).len(), 1);

    // Without the token the server refuses, and the worker does not start.
    let output = tokio::task::block_in_place(|| {
        system
            .baton(&["worker", "--spec", &spec, "--no-registry"])
            .env("ORDERS_TOKEN", "wrong")
            .output()
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains(&url) && !stderr.contains("wrong"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_mcp_configuration_stops_the_worker_naming_the_server_and_the_tool()
-> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![])?;
    let dir = tempfile::tempdir()?;
    let server = orders_server();
    let system = System::start().await?;
    let cases = [
        (
            format!("[[mcp]]\ncommand = [\"python3\", \"{server}\"]\ntools = [\"cancel_order\"]\n"),
            "tools lists \"cancel_order\", which the server does not have",
        ),
        (
            format!(
                "[[mcp]]\ncommand = [\"python3\", \"{server}\"]\n\n[[mcp]]\ncommand = [\"python3\", \"{server}\"]\n"
            ),
            "tool \"get_order\" is also offered by",
        ),
        (
            "[[mcp]]\nurl = \"http://127.0.0.1:9/mcp\"\n".to_owned(),
            "http://127.0.0.1:9/mcp",
        ),
        (
            "[[mcp]]\ncommand = [\"/nonexistent/server\"]\n".to_owned(),
            "cannot start /nonexistent/server",
        ),
    ];
    let bad_schema = (
        format!("[[mcp]]\ncommand = [\"python3\", \"{server}\"]\ntools = [\"malformed\"]\n"),
        "tool \"malformed\" has an input schema that is not a valid JSON Schema",
    );
    for (extra, said) in cases.into_iter().chain([bad_schema]) {
        let spec = refund_spec(dir.path(), &llm, &format!("\n{extra}"))?;
        let output = tokio::task::block_in_place(|| {
            system
                .baton(&["worker", "--spec", &spec, "--no-registry"])
                .env(
                    "ORDERS_TEST_TOOLS",
                    if extra.contains("malformed") { "1" } else { "" },
                )
                .output()
        })?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra}");
        assert!(stderr.contains(said), "{extra}: {stderr}");
    }
    // The static parts are checked without starting anything.
    let spec = refund_spec(dir.path(), &llm, "\n[[mcp]]\nurl = \"ftp://x\"\n")?;
    let output = tokio::task::block_in_place(|| system.baton(&["check", &spec]).output())?;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not an http(s) URL"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Starts (again) the refund agent of `spec` as process `label`, with a
/// short `ack_wait` so that a killed worker's message comes back soon.
async fn start_as(
    system: &mut System,
    label: &str,
    spec: &str,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    let log = log.to_string_lossy();
    let env = [("ORDERS_LOG", log.as_ref())];
    worker(system, label, spec, &["--ack-wait-secs", "2"], &env).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_hop_replays_its_journal_and_refunds_once() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123", "amount": 49.5}"#)]),
        // The worker is killed while it waits for this answer.
        Scripted::text("never read").after(Duration::from_secs(20)),
        Scripted::text("Refunded."),
    ])?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("refunds.jsonl");
    let mcp = format!(
        "\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\n",
        orders_server()
    );
    let spec = refund_spec(dir.path(), &llm, &mcp)?;
    let mut system = System::start().await?;
    start_as(&mut system, "first", &spec, &log).await?;
    let task = Envelope::task("Please refund order ABC-123.");
    let agent = baton_proto::AgentName::new("refund_llm")?;
    system.client.submit_to(&agent, &task).await?;
    // The refund is made, and the model asked again: kill the worker.
    baton_testkit::eventually(Duration::from_secs(20), || {
        let (made, asked) = (refunds(&log).len(), llm.requests().len());
        std::future::ready(if made == 1 && asked == 2 {
            Ok(())
        } else {
            Err(format!("{made} refunds, {asked} model calls"))
        })
    })
    .await?;
    system.process("first").kill9();
    start_as(&mut system, "second", &spec, &log).await?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    let stored = system.stored_events(task.session).await?;
    let ends = stored.iter().filter(|e| e.kind.is_terminal()).count();
    // The refund was made once; the answered model call was not made again
    // (3 requests: the first, the one lost with the worker, its repeat);
    // the repeat read the journaled tool result.
    let made = refunds(&log);
    let requests = llm.requests();
    println!(
        "{} refunds, {} model calls, {ends} ends",
        made.len(),
        requests.len()
    );
    assert_eq!((made.len(), requests.len(), ends), (1, 3, 1), "{made:?}");
    let reported = stored
        .iter()
        .filter(|e| e.kind == EventType::ToolCalled)
        .count();
    assert_eq!(reported, 1, "the refund is reported once");
    let last = requests[2].body["messages"].as_array().unwrap();
    assert!(
        last.last().unwrap()["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with("refund R-ABC-123"),
        "{last:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dying_server_a_hanging_tool_and_a_huge_result_each_end_clearly() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        // The server dies mid-call: the hop is retried, the server started again.
        Scripted::tool_calls(&[("flaky_lookup", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::text("Found it."),
        // A 5 MB result (over max_result_bytes, under the MCP SDK's 16 MiB
        // stdio line): the model is told it is too large.
        Scripted::tool_calls(&[("big_report", r#"{"megabytes": 5}"#)]),
        Scripted::text("Too big."),
        // A result with structured content only: the model reads it as JSON.
        Scripted::tool_calls(&[("order_facts", r#"{"order_id": "XYZ-9"}"#)]),
        Scripted::text("A lamp."),
        // A 2 MB result: over a message, under max_result_bytes: it goes
        // through the claim-check, journal and conversation alike.
        Scripted::tool_calls(&[("big_report", r#"{"megabytes": 2}"#)]),
        Scripted::text("Read it."),
        // A tool that hangs past timeout_ms: retried, then the session fails.
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "XYZ-9", "amount": 1}"#)]),
    ])?;
    let dir = tempfile::tempdir()?;
    let (marker, starts) = (dir.path().join("marker"), dir.path().join("starts"));
    let mcp = format!(
        "[retry]\nmax_attempts = 2\nmin_backoff_ms = 100\n\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\ntimeout_ms = 3000\nidempotent = true\ntools = [\"flaky_lookup\", \"big_report\", \"order_facts\", \"refund_order\"]\n",
        orders_server()
    );
    let spec = dir.path().join("refund_llm.toml");
    let text = std::fs::read_to_string(refund_spec(dir.path(), &llm, "")?)?;
    // [retry] belongs to the spec, before [llm].
    std::fs::write(&spec, text.replacen("[llm]", &format!("{mcp}\n[llm]"), 1))?;
    let spec = spec.to_string_lossy().into_owned();
    let mut system = System::start().await?;
    let (marker_s, starts_s) = (marker.to_string_lossy(), starts.to_string_lossy());
    start(
        &mut system,
        &spec,
        &[
            ("ORDERS_TEST_TOOLS", "1"),
            ("ORDERS_MARKER", &marker_s),
            ("ORDERS_STARTS", &starts_s),
        ],
    )
    .await?;
    let events = completed(&system, "look it up").await?;
    let started = std::fs::read_to_string(&starts)?.lines().count();
    assert_eq!(started, 2, "the server is started again after it died");
    assert!(
        events.iter().any(|e| e.kind == EventType::Retrying),
        "{:?}",
        kinds(&events)
    );

    completed(&system, "the big report").await?;
    let requests = llm.requests();
    let told = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap();
    let told = told.last().unwrap()["content"].as_str().unwrap_or_default();
    assert!(
        told.starts_with("error:") && told.contains("more than") && told.len() < 1000,
        "{}",
        &told[..told.len().min(300)]
    );

    completed(&system, "what is XYZ-9?").await?;
    let requests = llm.requests();
    let facts = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap();
    let facts: serde_json::Value = serde_json::from_str(
        facts.last().unwrap()["content"]
            .as_str()
            .unwrap_or_default(),
    )?;
    assert_eq!(
        (facts["item"].as_str(), facts["total"].as_f64()),
        (Some("lamp"), Some(20.0))
    );
    let events = completed(&system, "the long report").await?;
    let requests = llm.requests();
    let read = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap();
    let read = read.last().unwrap()["content"].as_str().unwrap_or_default();
    assert_eq!(
        read.len(),
        2 * 1024 * 1024,
        "the whole result reached the model"
    );
    let context = events
        .last()
        .unwrap()
        .context
        .as_ref()
        .expect("the ending context");
    assert!(
        context
            .messages
            .iter()
            .any(|m| m.content.len() == 2 * 1024 * 1024),
        "the result stays in the conversation"
    );

    system.process("refund_llm").kill9();
    let hanging = [("ORDERS_TEST_TOOLS", "1"), ("ORDERS_DELAY_S", "30")];
    worker(&mut system, "slow", &spec, &[], &hanging).await?;
    system.relay("human", "human", &[]).await?;
    let events = system
        .run("refund_llm", &Envelope::task("refund XYZ-9"))
        .await?;
    // Out of attempts: the fallback, a person, takes it, told why.
    let end = events.last().unwrap();
    assert_eq!(end.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(agents(&end.path), ["refund_llm", "human"]);
    let dead = events
        .iter()
        .find(|e| e.kind == EventType::DeadLettered)
        .expect("a dead letter");
    assert!(
        dead.detail
            .as_deref()
            .unwrap_or_default()
            .contains("did not answer within 3s"),
        "{:?}",
        dead.detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_lists_a_sessions_tool_calls_in_order() -> anyhow::Result<()> {
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "NOPE"}"#)]),
        Scripted::tool_calls(&[("refund_order", r#"{"order_id": "ABC-123", "amount": 1}"#)]),
        Scripted::text("Done."),
    ])?;
    let (mut system, _dir, _log) = on_stdio(&llm, "").await?;
    let events = completed(&system, "refund ABC-123").await?;
    let session = events[0].session.to_string();
    let url = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let seen = crate::gateways::console::browser(&["tools", &url, &session])?;
    assert_eq!(
        seen["tools"],
        serde_json::json!(["get_order", "get_order", "refund_order"]),
        "{seen}"
    );
    assert_eq!(
        seen["outcomes"],
        serde_json::json!(["ok", "error", "ok"]),
        "{seen}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_tool_loops_under_random_kills_refund_each_step_once_and_end_once()
-> anyhow::Result<()> {
    const SESSIONS: usize = 50;
    const STEPS: usize = 5;
    // Each answer follows from the conversation: a refund per step until
    // five are done, then the answer.
    let llm = FakeLlm::responding(|body| {
        let done = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        let answer = if done < STEPS {
            let args = format!(r#"{{"order_id": "ABC-123", "amount": {}}}"#, done + 1);
            Scripted::tool_calls(&[("refund_order", &args)])
        } else {
            Scripted::text("all refunded")
        };
        answer.after(Duration::from_millis(150))
    })?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("refunds.jsonl");
    // The order server honours the idempotency key: a refund cut short by
    // a kill is made again with the same key, and made once.
    let mcp = format!(
        "\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\nidempotent = true\n",
        orders_server()
    );
    let spec = refund_spec(dir.path(), &llm, &mcp)?;
    let mut system = System::start().await?;
    for worker in ["w0", "w1"] {
        start_as(&mut system, worker, &spec, &log).await?;
    }
    let agent = baton_proto::AgentName::new("refund_llm")?;
    let tasks: Vec<Envelope> = (0..SESSIONS)
        .map(|n| Envelope::task(format!("session {n}")))
        .collect();
    for task in &tasks {
        system.client.submit_to(&agent, task).await?;
    }
    // Kill a worker at a random moment, six times, starting another each time.
    let mut live = vec!["w0".to_owned(), "w1".to_owned()];
    let kills = 6;
    for kill in 0..kills {
        tokio::time::sleep(Duration::from_millis(fastrand::u64(300..1200))).await;
        let victim = live.remove(fastrand::usize(..live.len()));
        system.process(&victim).kill9();
        let next = format!("w{}", kill + 2);
        start_as(&mut system, &next, &spec, &log).await?;
        live.push(next);
    }
    let ends = baton_testkit::eventually(Duration::from_secs(120), || async {
        let mut ends = std::collections::HashMap::new();
        for task in &tasks {
            let stored = system.stored_events(task.session).await?;
            let terminal: Vec<_> = stored
                .iter()
                .filter(|e| e.kind.is_terminal())
                .cloned()
                .collect();
            ends.insert(task.session, terminal);
        }
        let ended = ends.values().filter(|t| !t.is_empty()).count();
        anyhow::ensure!(ended == SESSIONS, "{ended} of {SESSIONS} ended");
        Ok(ends)
    })
    .await?;
    // What the order server did, by the envelope in each call's key.
    let mut refunded: std::collections::HashMap<String, Vec<u64>> =
        std::collections::HashMap::new();
    for refund in refunds(&log) {
        let key = refund["key"].as_str().unwrap_or_default();
        let envelope = key.split('/').next().unwrap_or_default().to_owned();
        refunded
            .entry(envelope)
            .or_default()
            .push(refund["amount"].as_f64().unwrap_or(0.0) as u64);
    }
    let requests = llm.requests();
    let (mut wrong_refunds, mut wrong_ends, mut went_back) = (0, 0, 0);
    let mut repeats = 0;
    for task in &tasks {
        let mut amounts = refunded
            .get(&task.id.to_string())
            .cloned()
            .unwrap_or_default();
        amounts.sort_unstable();
        wrong_refunds += usize::from(amounts != [1, 2, 3, 4, 5]);
        let terminal = &ends[&task.session];
        wrong_ends += usize::from(terminal.len() != 1 || terminal[0].kind != EventType::Completed);
        // The steps this session's model requests were at, in the order
        // they came: a replay goes on from the journal, so the step never
        // goes back (without it, a kill at step k would ask steps 1..k again).
        let text = task.context.initial_query.clone();
        let steps: Vec<usize> = requests
            .iter()
            .filter_map(|r| r.body["messages"].as_array())
            .filter(|m| m.iter().any(|m| m["content"] == text.as_str()))
            .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
            .collect();
        repeats += steps.len().saturating_sub(STEPS + 1);
        went_back += usize::from(steps.windows(2).any(|pair| pair[1] < pair[0]));
    }
    println!(
        "{SESSIONS} sessions x {STEPS} refunds, {kills} kills: {wrong_refunds} sessions refunded other than once per step, \
         {wrong_ends} without exactly one completed end, {} model requests ({repeats} repeated: answers lost with a worker), \
         {went_back} sessions whose model was asked an answered step again",
        requests.len()
    );
    assert_eq!((wrong_refunds, wrong_ends, went_back), (0, 0, 0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn at_the_lean_level_tool_calls_go_out_live_and_are_not_stored() -> anyhow::Result<()> {
    use baton_proto::Wire;
    use futures::StreamExt;
    let llm = FakeLlm::start(vec![
        Scripted::tool_calls(&[("get_order", r#"{"order_id": "ABC-123"}"#)]),
        Scripted::text("On its way."),
    ])?;
    let dir = tempfile::tempdir()?;
    let mcp = format!(
        "\n[[mcp]]\ncommand = [\"python3\", \"{}\"]\n",
        orders_server()
    );
    let spec = refund_spec(dir.path(), &llm, &mcp)?;
    let mut system = System::start().await?;
    worker(&mut system, "lean", &spec, &["--events", "lean"], &[]).await?;
    let task = Envelope::task("Where is order ABC-123?");
    let mut live = system
        .nats
        .subscribe(baton_proto::Subjects::default().live(task.session))
        .await?;
    let agent = baton_proto::AgentName::new("refund_llm")?;
    system.client.submit_to(&agent, &task).await?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(20))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    let mut seen = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), live.next()).await
    {
        seen.push(baton_proto::Event::from_msgpack(&message.payload)?);
    }
    let called: Vec<_> = seen
        .iter()
        .filter(|e| e.kind == EventType::ToolCalled)
        .collect();
    assert_eq!(called.len(), 1, "{:?}", kinds(&seen));
    assert!(
        called[0]
            .detail
            .as_deref()
            .unwrap_or_default()
            .starts_with("get_order ok")
    );
    let stored = system.stored_events(task.session).await?;
    assert!(
        !stored.iter().any(|e| e.kind == EventType::ToolCalled),
        "{:?}",
        kinds(&stored)
    );
    Ok(())
}

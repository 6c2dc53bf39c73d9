//! `baton mcp serve` against the official MCP Python SDK, over stdio and
//! over streamable HTTP: agent types as tools, a call runs a session, its
//! events arrive as progress, and a failure is a tool error.

use std::time::Duration;

use crate::util::{System, wants};

/// A system with the registry, the router, two demo agents and an agent
/// that always fails.
async fn system() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    system
        .refund_desk("fragile", &["--fatal", "--no-fallback"])
        .await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |a| {
            a.candidates.len() == 3
        })
        .await?;
    Ok(system)
}

/// Runs `scripts/mcp_client.py ARGS`; its JSON answer.
fn client(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    crate::util::python_json("mcp_client.py", "mcp", args)
}

/// The conversations' desk (triage hands refunds to `refunds`) on the
/// stand-in models, served over MCP's streamable HTTP: the system, the
/// server's URL, and the specs' folder.
async fn desk_over_mcp(
    triage: &baton_testkit::FakeLlm,
    refunds: &baton_testkit::FakeLlm,
) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    let desk = crate::conversation::conversations::Desk::default();
    let (mut system, _url, dir) =
        crate::conversation::conversations::desk_with(triage, refunds, desk, &[]).await?;
    let serve = [
        "mcp",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--agents",
        "triage,refunds",
    ];
    system.spawn("mcp", &serve, "MCP server listening").await?;
    let url = system.logged_url("mcp")?;
    Ok((system, url, dir))
}

/// What every transport must show.
fn check(seen: &serde_json::Value) {
    assert_eq!(
        seen["tools"],
        serde_json::json!(["baton.feedback", "fragile", "general_enquiry", "refund"]),
        "{seen}"
    );
    let description = seen["description"].as_str().unwrap_or_default();
    assert!(
        description.starts_with("Answers general questions")
            && description.contains("customer_service"),
        "the registry describes the tool: {seen}"
    );
    assert_eq!(seen["required"], serde_json::json!(["question"]), "{seen}");
    assert_eq!(seen["is_error"], false, "{seen}");
    let text = seen["text"][0].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Refunds are accepted within 30 days"),
        "{seen}"
    );
    let progress: Vec<&str> = seen["progress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(
        progress.contains(&"handoff general_enquiry -> refund (knowledge_gap)"),
        "{progress:?}"
    );
    assert_eq!(progress.last(), Some(&"completed refund"), "{progress:?}");
    assert_eq!(seen["failed_is_error"], true, "{seen}");
    let failed = seen["failed_text"][0].as_str().unwrap_or_default();
    assert!(failed.contains("failed: fatal"), "{seen}");
    assert_eq!(seen["missing_is_error"], true, "{seen}");
    // Feedback through the tool, on the session the result names.
    assert!(
        seen["session"].as_str().is_some_and(|s| s.len() == 36),
        "{seen}"
    );
    assert_eq!(seen["feedback_is_error"], false, "{seen}");
    let session = seen["session"].as_str().unwrap_or_default();
    assert_eq!(
        seen["feedback_text"][0],
        format!("feedback 0.9 recorded for session {session}, credited to general_enquiry, refund"),
        "{seen}"
    );
    assert_eq!(seen["bad_feedback_is_error"], true, "{seen}");
    let refused = seen["bad_feedback_text"][0].as_str().unwrap_or_default();
    assert!(
        refused.contains("the score must be from 0 (not resolved) to 1"),
        "{seen}"
    );
    assert!(
        seen["missing_text"][0]
            .as_str()
            .is_some_and(|t| t.contains("`question`")),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_host_calls_agent_types_as_tools_over_stdio() -> anyhow::Result<()> {
    let system = system().await?;
    let baton = baton_testkit::baton_binary();
    let seen = client(&[
        "stdio",
        &baton.to_string_lossy(),
        system.server.url(),
        "I want a refund for order ABC-123",
    ])?;
    check(&seen);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_client_calls_agent_types_over_streamable_http_with_its_token() -> anyhow::Result<()>
{
    let mut system = system().await?;
    // Beyond loopback without a token: refused at start.
    let refused = system
        .baton(&["mcp", "serve", "--http", "0.0.0.0:0"])
        .output()?;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--access-token"));

    let token = "mcp-s3cret";
    let mut command = system.baton(&["mcp", "serve", "--http", "127.0.0.1:0"]);
    command.env("BATON_MCP_TOKEN", token);
    system.adopt("mcp", baton_testkit::ChildProcess::spawn(command, "mcp")?);
    system
        .wait_log("mcp", "MCP server listening", Duration::from_secs(30))
        .await?;
    let url = system.logged_url("mcp")?;
    let refused = client(&["unauthorized", &url])?;
    assert_eq!(refused["status"], 401, "{refused}");
    let seen = client(&["http", &url, "I want a refund for order ABC-123", token])?;
    check(&seen);
    assert!(!system.process("mcp").stderr().contains(token));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_client_continues_a_conversation_at_its_holder_and_answers_a_question()
-> anyhow::Result<()> {
    use baton_testkit::{FakeLlm, Scripted};
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = FakeLlm::start(vec![
        Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]),
        Scripted::text("Refunding ABC-123."),
        Scripted::text("You are welcome."),
    ])?;
    let (_system, url, _dir) = desk_over_mcp(&triage, &refunds).await?;
    let seen = client(&[
        "turns",
        &url,
        "triage",
        "mcp-7",
        "I want a refund.",
        "ABC-123",
        "Thanks.",
    ])?;
    let turns = seen["turns"].as_array().cloned().unwrap_or_default();
    let texts: Vec<&str> = turns
        .iter()
        .map(|t| t["text"][0].as_str().unwrap_or_default())
        .collect();
    // The question, the answer it led to, then turn 2 at the holder.
    assert_eq!(
        texts,
        ["Which order?", "Refunding ABC-123.", "You are welcome."],
        "{seen}"
    );
    assert!(turns.iter().all(|t| t["is_error"] == false), "{seen}");
    assert!(
        turns
            .iter()
            .all(|t| t["structured"]["conversation"] == "mcp-7"),
        "{seen}"
    );
    let waiting: Vec<bool> = turns
        .iter()
        .map(|t| t["structured"]["waiting"] == true)
        .collect();
    assert_eq!(waiting, [true, false, false], "{seen}");
    // The answer resumed turn 1 (the same session); the third call was turn 2.
    assert_eq!(
        turns[0]["structured"]["session"],
        turns[1]["structured"]["session"]
    );
    assert_eq!(turns[2]["structured"]["turn"], 2, "{seen}");
    // Triage's model once; the holder's three times, the last with the whole
    // conversation.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 3));
    let last = crate::conversation::conversations::asked(&refunds, 2);
    assert!(
        last.iter().any(|m| m == "user: I want a refund.")
            && last.iter().any(|m| m == "assistant: Refunding ABC-123.")
            && last.last().map(String::as_str) == Some("user: Thanks."),
        "{last:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_caller_continues_only_the_conversations_it_started() -> anyhow::Result<()> {
    use baton_testkit::{FakeLlm, Scripted};
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = FakeLlm::start(vec![
        Scripted::text("Who are you?"),
        Scripted::text("Refund done, Ada."),
    ])?;
    let desk = crate::conversation::conversations::Desk::default();
    let (mut system, _url, dir) =
        crate::conversation::conversations::desk_with(&triage, &refunds, desk, &[]).await?;
    let (web, app) = ("web-0123456789abcdef", "app-fedcba9876543210");
    let callers = dir.path().join("mcp-callers");
    std::fs::write(&callers, format!("web {web}\napp {app}\n"))?;
    let callers = callers.to_string_lossy().into_owned();
    let serve = [
        "mcp",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--agents",
        "triage,refunds",
        "--callers",
        &callers,
    ];
    system.spawn("mcp", &serve, "MCP server listening").await?;
    let url = system.logged_url("mcp")?;
    let call = |token: &str, text: &str| -> anyhow::Result<serde_json::Value> {
        let seen = client(&["turns_as", &url, token, "triage", "mcp-9", text])?;
        Ok(seen["turns"][0].clone())
    };
    let first = call(web, "Refund ABC-123, please.")?;
    assert_eq!(first["text"][0], "Who are you?", "{first}");
    // Another caller may not continue it: refused, and no model asked.
    let other = call(app, "I am Bob.")?;
    assert_eq!(other["is_error"], true, "{other}");
    let why = other["text"][0].as_str().unwrap_or_default();
    assert!(why.contains("belongs to another caller"), "{why}");
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 1));
    // Its owner goes on.
    let second = call(web, "I am Ada.")?;
    assert_eq!(second["text"][0], "Refund done, Ada.", "{second}");
    assert_eq!(second["structured"]["turn"], 2, "{second}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_client_that_sets_a_log_level_gets_its_sessions_events_as_logs() -> anyhow::Result<()>
{
    let mut system = system().await?;
    let args = ["mcp", "serve", "--http", "127.0.0.1:0"];
    system.spawn("mcp", &args, "MCP server listening").await?;
    let url = system.logged_url("mcp")?;
    let question = "I want a refund for order ABC-123";
    let logs = |seen: &serde_json::Value| seen["logs"].as_array().cloned().unwrap_or_default();

    let info = client(&["logging", &url, "general_enquiry", question, "info"])?;
    assert_eq!(info["logging"], true, "the capability is declared: {info}");
    assert_eq!(info["is_error"], false, "{info}");
    let seen = logs(&info);
    let events: Vec<&str> = seen
        .iter()
        .filter_map(|l| l["data"]["event"].as_str())
        .collect();
    assert!(events.contains(&"handoff"), "{info}");
    assert_eq!(events.last(), Some(&"completed"), "{info}");
    assert!(
        seen.iter().all(|l| l["logger"] == "baton"
            && l["data"]["session"] == info["session"]
            && l["level"] == "info"),
        "{info}"
    );
    // Each MCP session has its own level: a new one that set none gets none.
    let none = client(&["logging", &url, "general_enquiry", question, "none"])?;
    assert_eq!(none["is_error"], false, "{none}");
    assert_eq!(logs(&none), Vec::<serde_json::Value>::new(), "{none}");
    // At `error`, a session that fails is logged and one that completes is not.
    let errors = client(&["logging", &url, "general_enquiry", question, "error"])?;
    assert_eq!(logs(&errors), Vec::<serde_json::Value>::new(), "{errors}");
    let failed = client(&["logging", &url, "fragile", "break", "error"])?;
    let seen = logs(&failed);
    let events: Vec<&str> = seen
        .iter()
        .filter_map(|l| l["data"]["event"].as_str())
        .collect();
    // Its end: the dead letter, and the `failed` event when it comes
    // before the call returns.
    assert_eq!(events.first(), Some(&"dead_lettered"), "{failed}");
    assert!(
        events
            .iter()
            .all(|e| ["dead_lettered", "failed"].contains(e)),
        "{failed}"
    );
    assert!(seen.iter().all(|l| l["level"] == "error"), "{failed}");
    Ok(())
}

/// An exec agent that answers in MCP's terms: `chart` with every kind of
/// content, `refuse` with a tool error.
const PAINTER: &str = r#"import json, sys
envelope = json.load(sys.stdin)
asked = envelope["context"]["initial_query"]
if asked == "refuse":
    said = {"content": [{"type": "text", "text": "no charts today"}], "isError": True}
else:
    said = {
        "content": [
            {"type": "text", "text": "the chart"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///chart.csv", "mimeType": "text/csv", "text": "x,y"}},
        ],
        "structuredContent": {"points": 2},
    }
print(json.dumps({"action": "terminate", "output": {"mcp": said}}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_mcp_answer_reaches_the_client_as_its_content_and_error() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("painter.py"), PAINTER)?;
    let spec = dir.path().join("painter.toml");
    std::fs::write(
        &spec,
        "name = \"painter\"\nkind = \"exec\"\n\n[exec]\ncommand = [\"python3\", \"painter.py\"]\n",
    )?;
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    system
        .spec_worker("painter", &spec, &["--no-registry"])
        .await?;
    let args = [
        "mcp",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--agents",
        "painter",
    ];
    system.spawn("mcp", &args, "MCP server listening").await?;
    let url = system.logged_url("mcp")?;

    let chart = client(&["content", &url, "painter", "chart"])?;
    assert_eq!(chart["is_error"], false, "{chart}");
    let kinds: Vec<&str> = (chart["content"].as_array().into_iter().flatten())
        .filter_map(|block| block["type"].as_str())
        .collect();
    assert_eq!(kinds, ["text", "image", "audio", "resource"], "{chart}");
    assert_eq!(chart["content"][1]["mimeType"], "image/png", "{chart}");
    assert_eq!(chart["content"][1]["data"], "iVBORw0KGgo=", "{chart}");
    assert_eq!(chart["content"][2]["mimeType"], "audio/wav", "{chart}");
    assert_eq!(
        chart["content"][3]["resource"]["uri"], "file:///chart.csv",
        "{chart}"
    );
    assert_eq!(chart["content"][3]["resource"]["text"], "x,y", "{chart}");
    assert_eq!(
        chart["structured"],
        serde_json::json!({"points": 2}),
        "{chart}"
    );

    let refused = client(&["content", &url, "painter", "refuse"])?;
    assert_eq!(refused["is_error"], true, "{refused}");
    assert_eq!(
        refused["content"][0]["text"], "no charts today",
        "{refused}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_question_is_asked_of_a_client_that_answers_elicitations() -> anyhow::Result<()> {
    use baton_testkit::{FakeLlm, Scripted};
    let triage = crate::conversation::conversations::transferring()?;
    let ask = || Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]);
    let refunds = FakeLlm::start(vec![ask(), Scripted::text("Refunding ABC-123."), ask()])?;
    let (_system, url, _dir) = desk_over_mcp(&triage, &refunds).await?;

    // Answered: the question comes as an elicitation, and the one call
    // returns the answer it led to.
    let seen = client(&[
        "elicit",
        &url,
        "triage",
        "mcp-e1",
        "ABC-123",
        "I want a refund.",
    ])?;
    let asked = seen["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "{seen}");
    assert_eq!(asked[0]["message"], "refunds asks: Which order?", "{seen}");
    assert_eq!(
        asked[0]["schema"]["required"],
        serde_json::json!(["answer"]),
        "{seen}"
    );
    let turn = &seen["turns"][0];
    assert_eq!(turn["text"][0], "Refunding ABC-123.", "{seen}");
    assert_eq!(turn["structured"]["waiting"], false, "{seen}");
    let last = crate::conversation::conversations::asked(&refunds, 1);
    assert!(last.iter().any(|m| m.contains("ABC-123")), "{last:#?}");

    // Declined: the question stays, and the call returns it, as for a
    // client without elicitation.
    let seen = client(&[
        "elicit",
        &url,
        "refunds",
        "mcp-e2",
        "-decline",
        "Another refund.",
    ])?;
    assert_eq!(seen["asked"].as_array().map(Vec::len), Some(1), "{seen}");
    let turn = &seen["turns"][0];
    assert_eq!(turn["text"][0], "Which order?", "{seen}");
    assert_eq!(turn["structured"]["waiting"], true, "{seen}");
    assert_eq!(
        refunds.requests().len(),
        3,
        "no model call after the decline"
    );
    Ok(())
}

//! `baton console` in a real browser (Debian's Chromium, driven by
//! Playwright): a session goes live to completed with its path, a dead
//! letter is replayed from the page, an inbox task is answered from the
//! page, agent output cannot run as script, and beyond loopback the console
//! refuses requests without its token.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};

use crate::util::{System, agents, wants};

/// Starts `baton console ARGS` as process `label`; returns its base URL.
pub(crate) async fn console(
    system: &mut System,
    label: &str,
    args: &[&str],
) -> anyhow::Result<String> {
    let mut all = vec!["console", "--listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    system.spawn(label, &all, "console listening").await?;
    system.logged_url(label)
}

/// Runs a phase of `scripts/console_browser.py`; its JSON answer.
pub(crate) fn browser(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        std::path::Path::new("/usr/bin/chromium").exists()
            || std::env::var_os("CHROMIUM").is_some(),
        "the browser tests need Chromium: apt-get install chromium (or set CHROMIUM)"
    );
    crate::util::python_json("console_browser.py", "playwright", args)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_goes_live_to_completed_and_a_dead_letter_is_replayed_from_the_page()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .refund_desk("f1", &["--fatal", "--no-fallback"])
        .await?;
    let broken = Envelope::task("fails until the fix ships");
    let first = system.run("fragile", &broken).await?;
    assert_eq!(
        first.last().map(|e| e.kind.clone()),
        Some(EventType::Failed)
    );
    system.process("f1").terminate();
    system.relay("f2", "fragile", &["--no-fallback"]).await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |a| {
            a.candidates.len() == 3
        })
        .await?;
    let url = console(&mut system, "console", &[]).await?;

    // A session sent after the page opened appears, and reaches completed, live.
    let baton = baton_testkit::baton_binary();
    let nats = system.server.url().to_owned();
    let seen = browser(&["live", &url, &baton.to_string_lossy(), &nats])?;
    assert_eq!(seen["state"], "completed", "{seen}");
    assert_eq!(seen["path"], "general_enquiry → refund", "{seen}");
    assert_eq!(
        seen["stayed"], true,
        "the row came without a reload: {seen}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["in_failed"], 0, "{seen}");
    assert_eq!(seen["in_completed_refund"], 1, "{seen}");
    assert_eq!(seen["searched"], seen["session"], "{seen}");
    assert_eq!(seen["page_path"], "general_enquiry → refund", "{seen}");
    assert_eq!(
        seen["nodes"],
        serde_json::json!(["general_enquiry", "refund"])
    );
    assert_eq!(
        seen["agents"],
        serde_json::json!(["fragile", "general_enquiry", "refund"]),
        "{seen}"
    );
    assert_eq!(seen["joined_live"], true, "{seen}");
    // The demo agents describe themselves (from their heartbeats); a relay does not.
    assert_eq!(
        seen["descriptions"],
        serde_json::json!([
            "Answers general questions and routes the rest",
            "Decides refunds under the shop's policy"
        ]),
        "{seen}"
    );
    let session = seen["session"].as_str().unwrap_or_default().parse()?;
    let end = system.client.wait(session, Duration::from_secs(10)).await?;
    assert_eq!(agents(&end.path), ["general_enquiry", "refund"]);
    let messages = end.context.as_ref().map_or(0, |c| c.messages.len());
    assert!(
        messages >= 2,
        "the ending context came with the terminal event"
    );
    assert_eq!(seen["context_messages"], messages, "{seen}");

    // The dead letter, replayed from the page, completes its session.
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    let replayed = browser(&["replay", &url, &dead[0].seq.to_string()])?;
    assert_eq!(
        replayed["session"],
        broken.session.to_string(),
        "{replayed}"
    );
    assert_eq!(replayed["landed"], broken.session.to_string(), "{replayed}");
    assert_eq!(replayed["state"], "completed", "{replayed}");
    let end = system
        .client
        .wait(broken.session, Duration::from_secs(10))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_task_is_answered_from_the_page_and_agent_markup_never_runs() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    system.human_support().await?;
    let evil = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\"> refund?";
    let task = Envelope::task(evil);
    let human = AgentName::new("human_support")?;
    system.client.submit_to(&human, &task).await?;
    system.waiting(task.session).await?;
    let url = console(&mut system, "console", &[]).await?;

    let answer = "Refund approved <b>by</b> the console";
    let seen = browser(&["inbox", &url, &task.session.to_string(), answer])?;
    assert_eq!(seen["question_text"], evil, "shown as text: {seen}");
    assert_eq!(seen["pwned_in_inbox"], serde_json::Value::Null, "{seen}");
    assert_eq!(seen["pwned_in_session"], serde_json::Value::Null, "{seen}");
    assert_eq!(seen["first_message"], evil, "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert_eq!(seen["landed"], task.session.to_string());
    assert_eq!(seen["answer"], answer, "{seen}");
    let end = system
        .client
        .wait(task.session, Duration::from_secs(10))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(
        end.output.as_ref().and_then(|o| o.as_str()),
        Some(answer),
        "the session ends with the console's answer"
    );

    // A second task is handed on from the page to an agent type, which completes it.
    system
        .relay("desk", "refund_desk", &["--no-fallback"])
        .await?;
    let task = Envelope::task("a refund over the limit");
    system.client.submit_to(&human, &task).await?;
    system.waiting(task.session).await?;
    let note = "approved up to 500 EUR";
    let seen = browser(&[
        "inbox",
        &url,
        &task.session.to_string(),
        note,
        "handoff",
        "refund_desk",
    ])?;
    assert_eq!(seen["path"], "human_support → refund_desk", "{seen}");
    let end = system
        .client
        .wait(task.session, Duration::from_secs(10))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    assert_eq!(agents(&end.path), ["human_support", "refund_desk"]);
    let context = end.context.as_deref().expect("the ending context");
    assert!(
        context.messages.iter().any(|m| m.content == note),
        "the person's note travelled on: {:?}",
        context.messages
    );

    // A third is cancelled from its page: it fails as cancelled and leaves the inbox.
    let task = Envelope::task("never mind");
    system.client.submit_to(&human, &task).await?;
    system.waiting(task.session).await?;
    let seen = browser(&["cancel", &url, &task.session.to_string()])?;
    assert_eq!(seen["before"], "waiting", "{seen}");
    assert_eq!(seen["landed"], task.session.to_string(), "{seen}");
    assert!(
        seen["failure"]
            .as_str()
            .is_some_and(|f| f.starts_with("cancelled")),
        "{seen}"
    );
    assert_eq!(seen["button_left"], 0, "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    let end = system
        .client
        .wait(task.session, Duration::from_secs(10))
        .await?;
    assert_eq!(end.reason, Some(baton_proto::Reason::Cancelled));
    let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
    assert!(!listed.contains(&task.id.to_string()), "{listed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn beyond_loopback_the_console_refuses_requests_without_its_token() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // No token: it will not listen beyond loopback at all.
    let refused = system
        .baton(&["console", "--listen", "0.0.0.0:0"])
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("--access-token"), "{stderr}");

    let token = "console-s3cret-token";
    let mut command = system.baton(&["console", "--listen", "0.0.0.0:0"]);
    command.env("BATON_CONSOLE_TOKEN", token);
    let process = baton_testkit::ChildProcess::spawn(command, "console")?;
    system.adopt("console", process);
    system
        .wait_log("console", "console listening", Duration::from_secs(30))
        .await?;
    // It listens on every address; the test reaches it on loopback.
    let url = system
        .logged_url("console")?
        .replacen("http://0.0.0.0:", "http://127.0.0.1:", 1);
    let seen = browser(&["auth", &url, token])?;
    assert_eq!(seen["no_token"], 401, "{seen}");
    assert_eq!(seen["wrong_token"], 401, "{seen}");
    assert_eq!(seen["no_token_replay"], 401, "{seen}");
    assert_eq!(seen["bad_csrf_replay"], 403, "{seen}");
    assert_eq!(
        seen["cross_site_replay"],
        serde_json::json!([403, "cross-site form refused"]),
        "{seen}"
    );
    assert_eq!(seen["bearer"], 200, "{seen}");
    assert_eq!(seen["browser"], 200, "{seen}");
    assert_eq!(seen["title"], "Sessions · Baton", "{seen}");
    assert!(
        !system.process("console").stderr().contains(token),
        "the token is never logged"
    );
    Ok(())
}

/// `GET path` on `base` (http://host:port), as status and body.
pub(crate) async fn get(base: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, response))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_works_as_the_operator_role_with_its_generated_block() -> anyhow::Result<()> {
    use crate::operations::permissions::{as_user, generated_config, ok_as};
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("registry", &["registry"]),
        ("intake", &["worker", "intake"]),
        ("client", &["client"]),
        ("operator", &["operator"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let spawn_as = |user: &str, args: &[&str]| {
        let mut all: Vec<String> = as_user(user).into();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all
    };
    let args = spawn_as(
        "router",
        &["router", "--default-agent", "intake", "--no-registry"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    system.spawn("router", &args, "router started").await?;
    let args = spawn_as("registry", &["registry", "--heartbeat-ms", "200"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    system
        .spawn("registry", &args, "registry serving lookups")
        .await?;
    let flags = spawn_as("intake", &["--heartbeat-ms", "200", "--no-fallback"]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    system.relay("intake", "intake", &flags).await?;
    let sent = ok_as(&system, "client", &["send", "--wait", "where is my order"])?;
    let stdout = String::from_utf8_lossy(&sent.stdout);
    let session = crate::util::session_in(&stdout)?.to_owned();

    // Global flags may follow the subcommand: the operator's credentials.
    let operator = as_user("operator");
    let operator: Vec<&str> = operator.iter().map(String::as_str).collect();
    let mut args = operator.clone();
    args.extend(["--trace-url", "http://tracing.example/trace/{trace_id}"]);
    let base = console(&mut system, "console", &args).await?;
    let (status, list) = get(&base, "/").await?;
    assert_eq!(status, 200, "{list}");
    assert!(list.contains(&format!("s-{session}")), "{list}");
    let (status, page) = get(&base, &format!("/sessions/{session}")).await?;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-state=\"completed\""), "{page}");
    assert!(page.contains("as the session ended"), "{page}");
    // The session's trace, linked into the tracing UI.
    let link = page
        .split("href=\"http://tracing.example/trace/")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default();
    assert!(
        link.len() == 32 && link.bytes().all(|b| b.is_ascii_hexdigit()),
        "{page}"
    );
    for path in ["/agents", "/dlq", "/inbox"] {
        let (status, page) = get(&base, path).await?;
        assert_eq!(status, 200, "{path}: {page}");
    }
    let log = system.process("console").stderr();
    assert!(!log.contains("Permissions Violation"), "{log}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_links_to_its_conversation_whose_page_lists_the_turns_in_order() -> anyhow::Result<()>
{
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = baton_testkit::FakeLlm::start(vec![
        baton_testkit::Scripted::text("Who are you?"),
        baton_testkit::Scripted::text("Refund done."),
    ])?;
    let desk = crate::conversation::conversations::Desk::default();
    let (mut system, _url, _dir) =
        crate::conversation::conversations::desk_with(&triage, &refunds, desk, &[]).await?;
    let url = console(&mut system, "console", &[]).await?;
    let id = "cv-<b>1</b>";
    let marked = "<img src=x onerror=\"window.__injected=true\">I am Ada.";
    let mut sessions = Vec::new();
    for text in ["Refund ABC-123, please.", marked] {
        let sent = system.baton_stdout(&["send", "--conversation", id, "--wait", text])?;
        sessions.push(crate::util::session_in(&sent)?.to_owned());
    }
    let seen = browser(&["conversation", &url, &sessions[1]])?;
    let rows: Vec<Vec<String>> = serde_json::from_value(seen["rows"].clone())?;
    let cells = |n: usize| rows[n][..5].to_vec();
    assert_eq!(rows.len(), 2, "{seen}");
    assert_eq!(
        cells(0),
        [
            "1",
            "Refund ABC-123, please.",
            "triage → refunds",
            "refunds",
            "completed"
        ]
    );
    // Agent and user text is shown as text, never run.
    assert_eq!(cells(1), ["2", marked, "refunds", "refunds", "completed"]);
    assert_eq!(seen["injected"], false, "{seen}");
    let links: Vec<String> = serde_json::from_value(seen["sessions"].clone())?;
    let expected: Vec<String> = sessions.iter().map(|s| format!("/sessions/{s}")).collect();
    assert_eq!(links, expected);
    assert_eq!(seen["landed"], sessions[1].as_str(), "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversations_page_shows_an_ended_turn_and_writes_nothing() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The router writes its defaults, so a turn goes straight to its agent
    // type; then it stops, and its keeper with it: nothing closes turns.
    system.router(&[]).await?;
    system.relay("helper", "helper", &["--no-registry"]).await?;
    let url = console(&mut system, "console", &[]).await?;
    system.process("router").terminate();
    let id = "cv-ended";
    let sent = [
        "send",
        "--conversation",
        id,
        "--to",
        "helper",
        "Hello there",
    ];
    let session: uuid::Uuid = system.baton_stdout(&sent)?.trim().parse()?;
    let events = system
        .session_events(session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    let conversations =
        baton_client::conversation::Conversations::open(system.client.clone(), 1).await?;
    let (before, revision) = conversations.get(id).await?.expect("the conversation");
    assert_eq!(before.running.as_ref().map(|r| r.session), Some(session));

    let (status, page) = get(&url, &format!("/conversations/{id}")).await?;
    assert_eq!(status, 200, "{page}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (after, revision_after) = conversations.get(id).await?.expect("the conversation");
    assert_eq!(revision_after, revision, "the page wrote the record");
    assert_eq!(after.running, before.running);
    assert!(page.contains("Turn 1 ended: "), "{page}");
    assert!(page.contains("helper answered"), "{page}");
    Ok(())
}

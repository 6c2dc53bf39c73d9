//! A worker's sign-in to an MCP server that signs its callers in with
//! OAuth: the official `mcp` SDK's server with the SDK's own
//! authorization-server pieces (tests/e2e/scripts/mcp_oauth_server.py),
//! `baton mcp login`, and workers that share the kept sign-in and refresh
//! it, one at a time, against an authorization server that rotates refresh
//! tokens and counts one used twice.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};

use crate::util::{System, kinds};

/// A Python agent that calls the server's `whoami` once per task, through
/// its worker (`ctx.tool`), and answers with what it said.
const CALLER: &str = r#"
import baton

agent = baton.Agent()


@agent.task
async def call(task: baton.Task, ctx: baton.Context) -> baton.Outcome:
    said = await ctx.tool("whoami", {})
    return baton.complete({"said": said.text}, say=said.text)


agent.run()
"#;

/// The server's events (`login`, `refresh`, `reused`, `call`) in `log`.
fn events(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|event| event["event"].as_str().map(str::to_owned))
        .collect()
}

fn count(events: &[String], event: &str) -> usize {
    events.iter().filter(|seen| *seen == event).count()
}

/// Starts the OAuth MCP server, its tokens lasting `seconds`, logging to
/// `log`: the process and its URL.
async fn oauth_server(
    log: &Path,
    seconds: &str,
) -> anyhow::Result<(baton_testkit::ChildProcess, String)> {
    oauth_server_with(log, &[("TOKEN_SECONDS", seconds)]).await
}

/// As [`oauth_server`], with `env` (`TOKEN_SECONDS`, `REVOKE_AFTER_CALLS`).
async fn oauth_server_with(
    log: &Path,
    env: &[(&str, &str)],
) -> anyhow::Result<(baton_testkit::ChildProcess, String)> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts/mcp_oauth_server.py");
    let mut command = std::process::Command::new("python3");
    command
        .arg(script)
        .env("LOG", log)
        .envs(env.iter().copied());
    let mut process = baton_testkit::ChildProcess::spawn(command, "oauth")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let said = process.stderr();
        if let Some(url) = said
            .lines()
            .find_map(|line| line.strip_prefix("listening "))
        {
            return Ok((process, url.trim().to_owned()));
        }
        anyhow::ensure!(
            process.is_running() && tokio::time::Instant::now() < deadline,
            "the OAuth MCP server did not start:\n{said}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes the caller's program and its spec, whose `[[mcp]]` is `url`
/// with a person's sign-in, into `dir`: the spec's path.
fn caller_spec(dir: &Path, url: &str) -> anyhow::Result<PathBuf> {
    let program = dir.join("caller.py");
    std::fs::write(&program, CALLER)?;
    let spec = dir.join("caller.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"caller\"\nkind = \"exec\"\nconcurrency = 8\n\n[exec]\ncommand = [\"python3\", {program:?}]\nmode = \"persistent\"\n\n[[mcp]]\nurl = {url:?}\nauth = \"oauth\"\n"
        ),
    )?;
    Ok(spec)
}

/// `baton mcp login`'s flags after the URL: the suite's curl is the browser.
const LOGIN: [&str; 4] = ["--open-with", "curl -sL -o /dev/null", "--wait-secs", "20"];

/// A worker of the caller's `spec`, as NATS user `user` when given, with
/// the Python package on its path.
fn caller_worker(system: &System, spec: &str, user: Option<&str>) -> std::process::Command {
    let auth = user.map(crate::operations::permissions::as_user);
    let mut args: Vec<&str> = auth.iter().flatten().map(String::as_str).collect();
    args.extend(["worker", "--spec", spec, "--no-registry"]);
    let mut command = system.baton(&args);
    command.env(
        "PYTHONPATH",
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk/python"),
    );
    command
}

/// Starts a worker of the caller's `spec` as process `label` (NATS user
/// `user` when given), and waits until it serves.
async fn start_caller(
    system: &mut System,
    label: &str,
    spec: &str,
    user: Option<&str>,
) -> anyhow::Result<()> {
    let command = caller_worker(system, spec, user);
    system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
    system
        .wait_log(label, "worker started", Duration::from_secs(30))
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workers_share_one_sign_in_and_refresh_it_one_at_a_time() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("oauth.log");
    // Tokens that last 4 s are refreshed when 2 s are left.
    let (server, url) = oauth_server(&log, "4").await?;
    system.adopt("oauth", server);

    // A person signs in once (the suite's curl is the browser).
    let mut args = vec!["mcp", "login", url.as_str()];
    args.extend(LOGIN);
    let login = system.baton(&args).output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&login.stdout),
        String::from_utf8_lossy(&login.stderr)
    );
    assert!(login.status.success(), "{said}");
    assert!(said.contains("refreshable"), "{said}");
    assert!(
        !said.contains("tok-") && !said.contains("ref-"),
        "a token was shown: {said}"
    );

    // Two workers of one agent type, both on that sign-in.
    let spec = caller_spec(dir.path(), &url)?;
    let spec = spec.to_string_lossy().into_owned();
    for label in ["w1", "w2"] {
        start_caller(&mut system, label, &spec, None).await?;
    }

    // Calls for 9 s, three at a time: tokens run out about four times,
    // while both workers call.
    let caller = AgentName::new("caller")?;
    let mut sent = Vec::new();
    for _ in 0..12 {
        for _ in 0..3 {
            let task = Envelope::task("who am I?");
            system.client.submit_to(&caller, &task).await?;
            sent.push(task.session);
        }
        tokio::time::sleep(Duration::from_millis(750)).await;
    }
    for session in sent {
        let events = system
            .session_events(session, Duration::from_secs(60))
            .await?;
        let end = events.last().map(|event| event.kind.clone());
        assert_eq!(end, Some(EventType::Completed), "{:?}", kinds(&events));
    }

    let seen = events(&log);
    assert_eq!(count(&seen, "login"), 1, "{seen:?}");
    assert_eq!(count(&seen, "call"), 36, "{seen:?}");
    // The workers refreshed, and never with a refresh token already used.
    assert!(count(&seen, "refresh") >= 2, "{seen:?}");
    assert_eq!(count(&seen, "reused"), 0, "{seen:?}");
    // Both workers served calls, and neither logged a token.
    for label in ["w1", "w2"] {
        let logged = system.process(label).stderr();
        assert!(
            !logged.contains("tok-") && !logged.contains("ref-"),
            "{label} logged a token"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_a_worker_granted_the_server_reads_its_sign_in() -> anyhow::Result<()> {
    use crate::operations::permissions::{as_user, generated_config, run_as};
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("oauth.log");
    let (server, url) = oauth_server(&log, "3600").await?;
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("operator", &["operator"]),
        (
            "granted",
            &["worker", "caller", "--human", "--mcp-login", &url],
        ),
        ("plain", &["worker", "caller", "--human"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    system.adopt("oauth", server);
    // The router makes the streams; the operator signs in.
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--default-agent", "caller", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let mut args = vec!["mcp", "login", url.as_str()];
    args.extend(LOGIN);
    let login = run_as(&system, "operator", &args)?;
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );

    let spec = caller_spec(dir.path(), &url)?;
    let spec = spec.to_string_lossy().into_owned();
    // A worker whose permissions do not name the server stops at start,
    // saying how to grant it.
    let plain =
        tokio::task::block_in_place(|| caller_worker(&system, &spec, Some("plain")).output())?;
    let said = String::from_utf8_lossy(&plain.stderr);
    assert!(!plain.status.success(), "{said}");
    assert!(said.contains("--mcp-login"), "{said}");
    assert_eq!(count(&events(&log), "call"), 0);

    // The granted one reads it, and its call is made.
    start_caller(&mut system, "granted", &spec, Some("granted")).await?;
    let task = Envelope::task("who am I?");
    system
        .client
        .submit_to(&AgentName::new("caller")?, &task)
        .await?;
    let events_seen = system
        .session_events(task.session, Duration::from_secs(60))
        .await?;
    let end = events_seen.last().map(|event| event.kind.clone());
    assert_eq!(end, Some(EventType::Completed), "{:?}", kinds(&events_seen));
    assert_eq!(count(&events(&log), "call"), 1);
    Ok(())
}

/// Signs in to `url` as a person would, with `baton mcp login`.
fn login(system: &System, url: &str) -> anyhow::Result<()> {
    let mut args = vec!["mcp", "login", url];
    args.extend(LOGIN);
    let login = system.baton(&args).output()?;
    anyhow::ensure!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_refused_for_its_sign_in_waits_for_a_person_and_is_made_after_authorize()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("oauth.log");
    // The first call ends the sign-in: every token is revoked.
    let (server, url) = oauth_server_with(&log, &[("REVOKE_AFTER_CALLS", "1")]).await?;
    system.adopt("oauth", server);
    login(&system, &url)?;
    let spec = caller_spec(dir.path(), &url)?;
    let spec = spec.to_string_lossy().into_owned();
    start_caller(&mut system, "w1", &spec, None).await?;
    let caller = AgentName::new("caller")?;
    let first = system.run("caller", &Envelope::task("who am I?")).await?;
    assert_eq!(
        first.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );

    // The next call is refused (401, and the refresh too): it did not run,
    // and waits for a person, naming the server.
    let task = Envelope::task("who am I, again?");
    system.client.submit_to(&caller, &task).await?;
    let session = task.session.to_string();
    let mut entry = None;
    for _ in 0..200 {
        let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
        entry = listed
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["session"] == session.as_str());
        if entry.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let entry = entry.ok_or_else(|| anyhow::anyhow!("nothing waits for session {session}"))?;
    assert_eq!(entry["reason"], "authorization_required", "{entry}");
    assert_eq!(entry["server"], url.as_str(), "{entry}");
    assert_eq!(entry["tool"], "whoami", "{entry}");
    let id = entry["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        count(&events(&log), "call"),
        1,
        "the refused call did not run"
    );

    // The console shows it with the command, and no buttons.
    let console = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let shown = crate::gateways::console::browser(&["sign_in", &console, &session])?;
    let text = shown["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!("baton inbox authorize {id}")),
        "{shown}"
    );
    assert!(text.contains(&url), "{shown}");
    assert_eq!(
        (shown["forms"].as_u64(), shown["buttons"].as_u64()),
        (Some(0), Some(0)),
        "{shown}"
    );
    assert_eq!(shown["errors"], serde_json::json!([]), "{shown}");

    // A person signs in again; the call is made, once, and the session ends.
    let authorized = system
        .baton(&[
            "inbox",
            "authorize",
            &id,
            "--open-with",
            "curl -sL -o /dev/null",
            "--wait-secs",
            "20",
        ])
        .output()?;
    let said = String::from_utf8_lossy(&authorized.stdout);
    assert!(
        authorized.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&authorized.stderr)
    );
    assert!(said.contains("the call is made again"), "{said}");
    assert!(!said.contains("tok-") && !said.contains("ref-"), "{said}");
    let events_seen = system
        .session_events(task.session, Duration::from_secs(60))
        .await?;
    assert_eq!(
        events_seen.last().map(|e| e.kind.clone()),
        Some(EventType::Completed),
        "{:?}",
        kinds(&events_seen)
    );
    let seen = events(&log);
    assert_eq!(
        (count(&seen, "login"), count(&seen, "call")),
        (2, 2),
        "{seen:?}"
    );
    // Settled: a second authorize is refused.
    let again = system
        .baton(&["inbox", "authorize", &id, "--wait-secs", "1"])
        .output()?;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing is waiting"));
    Ok(())
}

//! A server with users and permissions: a publish the user may not make
//! ends at once, with `forbidden`, never in a hang or a retry loop.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};
use baton_testkit::eventually;

use crate::util::{System, kinds};

/// Four users in one account: `admin` may do anything, `refund` may do
/// anything but publish to `payments`, `client` may not publish to any
/// agent subject. `sender` may publish only to the ingress, the events and
/// the JetStream API, and `lister` only to what a worker needs but no agent
/// subject: neither can ask the server for its own permissions, so their
/// refusals are only learnt from the server's errors.
const CONFIG: &str = r#"
accounts {
  BATON {
    jetstream: enabled
    users: [
      { user: admin, password: admin-pw }
      { user: refund, password: refund-pw, permissions: { publish: { deny: ["baton.agent.payments"] } } }
      { user: client, password: client-pw, permissions: { publish: { deny: ["baton.agent.>"] } } }
      { user: lister, password: lister-pw, permissions: { publish: { allow: ["$JS.API.>", "$JS.ACK.>", "baton.events.>", "baton.dlq.>", "baton.registry.>"] } } }
      { user: sender, password: sender-pw, permissions: { publish: { allow: ["baton.ingress", "baton.events.>", "$JS.API.>"] } } }
    ]
  }
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_handoff_the_worker_may_not_publish_ends_the_session_as_forbidden() -> anyhow::Result<()>
{
    let mut system = System::secured(CONFIG, "admin", "admin-pw").await?;
    // `payments` is served (its consumer exists), so the target is known.
    system.relay("payments", "payments", &[]).await?;
    // `refund` knows its rights before publishing; `lister` learns them from
    // the server's error.
    let mut sessions = Vec::new();
    for (agent, user, password) in [
        ("refund", "refund", "refund-pw"),
        ("listed", "lister", "lister-pw"),
    ] {
        let flags = [
            "--next",
            "payments",
            "--no-fallback",
            "--user",
            user,
            "--password",
            password,
        ];
        system.relay(agent, agent, &flags).await?;
        let task = Envelope::task("refund order 7, then pay it out");
        system
            .client
            .submit_to(&AgentName::new(agent)?, &task)
            .await?;
        // Well inside the publisher's retry budget (tens of seconds): the
        // refusal is not waited out.
        let events = system
            .session_events(task.session, Duration::from_secs(10))
            .await?;
        let failed = events.last().unwrap();
        assert_eq!(
            failed.reason.as_ref().map(|r| r.as_str()),
            Some("forbidden"),
            "{agent}"
        );
        let detail = failed.detail.clone().unwrap_or_default();
        assert!(detail.contains("baton.agent.payments"), "{detail}");
        assert!(detail.contains("baton permissions"), "{detail}");
        // Where the rights were known, no event claims a handoff; where the
        // refusal came back from the server, the handoff event had been
        // written with the envelope, and the failure follows it.
        let expected: &[&str] = if agent == "refund" {
            &["accepted", "dead_lettered", "failed"]
        } else {
            &["accepted", "handoff", "dead_lettered", "failed"]
        };
        assert_eq!(kinds(&events), expected, "{agent}");
        sessions.push(task.session);
        let log = system.process(agent).output();
        assert!(!log.contains(password), "a secret in the log:\n{log}");
    }
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 2);
    assert!(dead.iter().all(|d| d.reason.as_str() == "forbidden"));
    let agents: Vec<&str> = dead.iter().map(|d| d.agent.as_str()).collect();
    assert_eq!(agents, ["refund", "listed"]);
    // Nothing reached payments: no session was ever accepted there.
    system.settled().await?;
    for session in sessions {
        let stored = system.stored_events(session).await?;
        let at_payments = stored
            .iter()
            .filter(|e| e.agent.as_deref() == Some("payments"))
            .count();
        assert_eq!(at_payments, 0);
        let terminal = stored.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(terminal, 1, "exactly one terminal event");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_may_not_send_straight_to_an_agent_gets_a_clear_error() -> anyhow::Result<()>
{
    let mut system = System::secured(CONFIG, "admin", "admin-pw").await?;
    system.relay("refund", "refund", &[]).await?;
    // `client` is refused from its reported permissions, `sender` from the
    // server's error; both at once, not after the publish retries.
    for (user, password) in [("client", "client-pw"), ("sender", "sender-pw")] {
        let output = tokio::task::block_in_place(|| {
            system
                .baton(&[
                    "--user",
                    user,
                    "--password",
                    password,
                    "send",
                    "--to",
                    "refund",
                    "--direct",
                    "refund please",
                ])
                .output()
        })?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{user}: {stderr}");
        assert!(
            stderr.contains("refused a publish to baton.agent.refund"),
            "{user}: {stderr}"
        );
        assert!(!stderr.contains(password), "{user}: {stderr}");
    }
    // Nothing was queued for refund.
    eventually(Duration::from_secs(5), || async {
        let dead = system.client.dead_letters().await?;
        anyhow::ensure!(dead.is_empty(), "{} dead letters", dead.len());
        Ok(())
    })
    .await?;
    system.settled().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_the_url_work_and_are_never_printed() -> anyhow::Result<()> {
    let mut system = System::secured(CONFIG, "admin", "admin-pw").await?;
    // Every process of the system connects with the URL's credentials.
    system.relay("echo", "echo", &[]).await?;
    let task = Envelope::task("hello");
    let events = system.run("echo", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    // A wrong password is refused, and the message names the server, not the secret.
    let wrong = system
        .server
        .url()
        .replacen("nats://", "nats://admin:wrong-pw@", 1);
    let output = tokio::task::block_in_place(|| {
        std::process::Command::new(baton_testkit::baton_binary())
            .args(["--nats-url", &wrong, "dlq", "ls"])
            .env_remove("NATS_URL")
            .output()
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("cannot connect to NATS at nats://127.0.0.1:"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-pw"), "{stderr}");
    let log = system.process("echo").output();
    assert!(!log.contains("admin-pw"), "a secret in the log:\n{log}");
    Ok(())
}

/// A server config whose users have the blocks `baton permissions` prints:
/// each role's own, plus `admin` for the test's observer.
pub(crate) fn generated_config(users: &[(&str, &[&str])]) -> anyhow::Result<String> {
    let mut config = String::from("accounts {\n  BATON {\n    jetstream: enabled\n    users: [\n");
    config.push_str("      { user: admin, password: admin-pw }\n");
    for (user, role) in users {
        let output = std::process::Command::new(baton_testkit::baton_binary())
            .arg("permissions")
            .args(*role)
            .output()?;
        anyhow::ensure!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let block = String::from_utf8(output.stdout)?;
        config.push_str(&format!(
            "      {{\n        user: {user}\n        password: {user}-pw\n"
        ));
        for line in block.lines() {
            config.push_str("        ");
            config.push_str(line);
            config.push('\n');
        }
        config.push_str("      }\n");
    }
    config.push_str("    ]\n  }\n}\n");
    Ok(config)
}

/// Runs `baton ARGS` as `user`, and fails the test unless it succeeds.
pub(crate) fn ok_as(
    system: &System,
    user: &str,
    args: &[&str],
) -> anyhow::Result<std::process::Output> {
    let output = run_as(system, user, args)?;
    anyhow::ensure!(
        output.status.success(),
        "baton {args:?} as {user} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(output)
}

/// Runs `baton ARGS` as `user` and waits for it.
pub(crate) fn run_as(
    system: &System,
    user: &str,
    args: &[&str],
) -> std::io::Result<std::process::Output> {
    let auth = as_user(user);
    let mut all: Vec<&str> = auth.iter().map(String::as_str).collect();
    all.extend(args);
    tokio::task::block_in_place(|| system.baton(&all).output())
}

pub(crate) fn as_user(user: &str) -> [String; 4] {
    [
        "--user".into(),
        user.into(),
        "--password".into(),
        format!("{user}-pw"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn every_role_works_with_its_generated_permissions_and_nothing_more() -> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("registry", &["registry"]),
        ("intake", &["worker", "intake", "--to", "refund"]),
        ("refund", &["worker", "refund", "--to", "intake"]),
        ("client", &["client"]),
        ("operator", &["operator"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    // The router creates the streams; the others only read them.
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--default-agent", "intake", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let registry = as_user("registry");
    let mut args: Vec<&str> = registry.iter().map(String::as_str).collect();
    args.extend(["registry", "--heartbeat-ms", "200"]);
    system
        .spawn("registry", &args, "registry serving lookups")
        .await?;
    for (agent, next) in [("intake", Some("refund")), ("refund", None)] {
        let user = as_user(agent);
        let mut flags: Vec<&str> = user.iter().map(String::as_str).collect();
        flags.extend(["--heartbeat-ms", "200", "--no-fallback"]);
        if let Some(next) = next {
            flags.extend(["--next", next]);
        }
        system.relay(agent, agent, &flags).await?;
    }
    // A client sends through the router and waits: the session crosses
    // both workers and completes.
    let sent = run_as(&system, "client", &["send", "--wait", "refund my order"])?;
    let stdout = String::from_utf8_lossy(&sent.stdout);
    assert!(
        sent.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    assert!(
        stdout.contains("intake") && stdout.contains("refund"),
        "{stdout}"
    );
    // A task larger than a message, with a deadline: the claim-check and
    // the router's deadline timer work under the same blocks.
    let big = tempfile::NamedTempFile::new()?;
    std::fs::write(big.path(), "a long conversation ".repeat(40_000))?;
    let path = big.path().to_string_lossy().into_owned();
    let sent = run_as(
        &system,
        "client",
        &[
            "send",
            "--wait",
            "--timeout-secs",
            "20",
            "--deadline-ms",
            "60000",
            "--file",
            &path,
        ],
    )?;
    let logs: String = ["router", "intake", "refund"]
        .iter()
        .map(|label| system.process(label).output())
        .collect();
    assert!(
        sent.status.success(),
        "{}\n{logs}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // The registry reads its own permissions at start, as every process
    // does, without a refusal.
    let registry = system.process("registry").output();
    assert!(
        !registry.to_lowercase().contains("permissions violation"),
        "{registry}"
    );
    // A client asks the registry.
    let agents = ok_as(&system, "client", &["agents", "--json"])?;
    assert!(String::from_utf8_lossy(&agents.stdout).contains("refund"));
    // An operator reads the dead letters.
    let dlq = ok_as(&system, "operator", &["dlq", "ls"])?;
    assert!(String::from_utf8_lossy(&dlq.stdout).contains("no dead letters"));
    // An operator checks the deployment: every read its block allows, and
    // nothing to fix (without a system-account user, fsync is not known).
    let doctor = ok_as(&system, "operator", &["doctor", "--json"])?;
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout)?;
    assert_eq!(
        (report["errors"].as_u64(), report["warnings"].as_u64()),
        (Some(0), Some(0)),
        "{report:#}"
    );
    let stderr = String::from_utf8_lossy(&doctor.stderr);
    assert!(!stderr.contains("Permissions Violation"), "{stderr}");
    let live = report["findings"]
        .as_array()
        .and_then(|all| all.iter().find(|f| f["check"] == "consumers"));
    assert!(
        live.is_some_and(|f| f["message"]
            .as_str()
            .unwrap_or_default()
            .contains("registry")),
        "{report:#}"
    );
    // Everything above stayed inside the roles' declared footprints: the
    // server refused no publish and no subscription of any process.
    let log = system.server.log();
    let violations: Vec<&str> = log
        .lines()
        .filter(|line| {
            line.contains("Publish Violation") || line.contains("Subscription Violation")
        })
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // Refusals, each a clear error and never a hang:
    // a client may not send straight to an agent;
    let direct = run_as(
        &system,
        "client",
        &["send", "--to", "refund", "--direct", "x"],
    )?;
    let stderr = String::from_utf8_lossy(&direct.stderr);
    assert!(
        stderr.contains("refused a publish to baton.agent.refund"),
        "{stderr}"
    );
    // the refund user may not receive intake's replies,
    let inbox = run_as(&system, "refund", &["worker", "intake", "--relay"])?;
    let stderr = String::from_utf8_lossy(&inbox.stderr);
    assert!(!inbox.status.success());
    assert!(
        stderr.contains("may not subscribe to _INBOX_worker_intake."),
        "{stderr}"
    );
    // nor pull intake's tasks.
    let inbox = "--inbox-prefix=_INBOX_worker_refund";
    let pull = run_as(&system, "refund", &[inbox, "worker", "intake", "--relay"])?;
    let stderr = String::from_utf8_lossy(&pull.stderr);
    assert!(!pull.status.success());
    assert!(
        stderr.contains("may not pull its agent type's tasks"),
        "{stderr}"
    );
    assert!(
        stderr.contains("baton permissions worker intake"),
        "{stderr}"
    );
    // The server logged those refusals, so the check of the work above
    // would have caught any of its own.
    assert!(
        system.server.log().contains("Subscription Violation"),
        "the server logs what it refuses: {}",
        system.server.log()
    );
    // (Not `settled`: the deadline's timer stays queued until the deadline.)
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_answers_the_inbox_and_replays_dead_letters_under_its_generated_block()
-> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        (
            "human_support",
            &["worker", "human_support", "--human", "--to", "broken"],
        ),
        ("broken", &["worker", "broken"]),
        ("client", &["client"]),
        ("operator", &["operator"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let human = as_user("human_support");
    let mut flags: Vec<&str> = human.iter().map(String::as_str).collect();
    flags.push("--no-registry");
    let spec = crate::util::example("support/human_support.toml");
    system.spec_worker("human_support", &spec, &flags).await?;
    let broken = as_user("broken");
    let mut flags: Vec<&str> = broken.iter().map(String::as_str).collect();
    flags.extend(["--fatal", "--no-fallback", "--no-registry"]);
    system.relay("broken", "broken", &flags).await?;
    // A task for a person, sent by the client through the router.
    let sent = ok_as(
        &system,
        "client",
        &["send", "--to", "human_support", "--json", "is this fair?"],
    )?;
    let sent: serde_json::Value = serde_json::from_slice(&sent.stdout)?;
    let session: uuid::Uuid = sent["session"].as_str().unwrap_or_default().parse()?;
    let waiting = system.waiting(session).await?;
    let id = waiting.envelope.unwrap().to_string();
    // The operator reads it and answers it.
    let show = ok_as(&system, "operator", &["inbox", "show", &id])?;
    assert!(String::from_utf8_lossy(&show.stdout).contains("is this fair?"));
    ok_as(
        &system,
        "operator",
        &["inbox", "reply", &id, "Yes, it is fair."],
    )?;
    let end = system.client.wait(session, Duration::from_secs(30)).await?;
    assert_eq!(end.kind, EventType::Completed);
    // A task that fails for good, then the operator replays its dead letter.
    let sent = run_as(
        &system,
        "client",
        &["send", "--to", "broken", "--wait", "break"],
    )?;
    assert!(!sent.status.success());
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    let seq = dead[0].seq.to_string();
    ok_as(&system, "operator", &["dlq", "replay", &seq])?;
    let session = dead[0].session.unwrap();
    eventually(Duration::from_secs(30), || async {
        let stored = system.stored_events(session).await?;
        let reopened = stored
            .iter()
            .filter(|e| e.kind == EventType::Reopened)
            .count();
        let failed = stored
            .iter()
            .filter(|e| e.kind == EventType::Failed)
            .count();
        anyhow::ensure!(reopened == 1 && failed == 2, "{:?}", kinds(&stored));
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_may_not_create_the_missing_streams_says_so_at_once() -> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[("lead", &["worker", "lead"])];
    let config = generated_config(users)?;
    let system = System::secured(&config, "admin", "admin-pw").await?;
    // On a fresh server the streams are missing, and a worker's block does
    // not grant their creation: the router's does. Before, each of five
    // attempts waited out a 10 s request timeout.
    let early = run_as(&system, "lead", &["worker", "lead", "--relay"])?;
    let stderr = String::from_utf8_lossy(&early.stderr);
    assert!(!early.status.success());
    assert!(
        stderr.contains(
            "stream BATON_TASKS does not exist, and this NATS user may not create it \
             (publish to $JS.API.STREAM.CREATE.BATON_TASKS)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("`baton router`"), "{stderr}");
    assert!(
        !stderr.contains("stream not ready; asking again"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_versioned_worker_works_under_its_generated_block() -> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("helper", &["worker", "helper", "--version", "1"]),
        ("client", &["client"]),
    ];
    let config = generated_config(users)?;
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--default-agent", "helper", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    let user = as_user("helper");
    let mut flags: Vec<&str> = user.iter().map(String::as_str).collect();
    flags.extend(["--no-registry", "--no-fallback", "--version", "1"]);
    system.relay("helper", "helper", &flags).await?;
    // The client may not read the rollouts: it sends through the router,
    // which pins the session to version 1, whose worker answers.
    let sent = run_as(&system, "client", &["send", "--wait", "help me"])?;
    let stdout = String::from_utf8_lossy(&sent.stdout);
    let stderr = String::from_utf8_lossy(&sent.stderr);
    assert!(sent.status.success(), "{stdout}{stderr}");
    // Only version 1's consumer has a worker: had the task gone to the
    // type's own subject, nobody would have answered.
    assert!(
        stdout.contains("path:   helper") && stdout.contains("answer:"),
        "{stdout}"
    );
    let log = system.server.log();
    let violations: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("Violation"))
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    Ok(())
}

//! What a client can read: under its generated block, only the sessions
//! whose ids it knows, through the router; nothing of another prefix or
//! account. Every other way in is tried with the official NATS Python
//! client (`scripts/snoop.py`).

use std::time::Duration;

use baton_proto::{Envelope, EventType};

use crate::operations::permissions::{as_user, generated_config, ok_as, run_as};
use crate::util::{System, python_json};

const CARD: &str = "card 4111 1111 1111 1111";

/// The config of `generated_config`, plus a second account with one user.
fn with_other_account(config: &str) -> String {
    let end = config.rfind("}\n").unwrap_or(config.len());
    format!(
        "{}  OTHER {{\n    jetstream: enabled\n    users: [ {{ user: stranger, password: stranger-pw }} ]\n  }}\n}}\n",
        &config[..end]
    )
}

fn snoop(system: &System, user: &str, session: uuid::Uuid) -> anyhow::Result<serde_json::Value> {
    let url = system
        .server_url()
        .replacen("nats://", &format!("nats://{user}:{user}-pw@"), 1);
    // The inbox prefix of the user's block (`baton permissions` prints it).
    let inbox = if ["client", "other"].contains(&user) {
        "_INBOX_client"
    } else {
        "_INBOX"
    };
    let mut report = python_json(
        "snoop.py",
        "nats",
        &[&url, "baton", &session.to_string(), inbox],
    )?;
    if let Some(report) = report.as_object_mut() {
        report.remove("violations");
    }
    Ok(report)
}

fn outcome(report: &serde_json::Value, attempt: &str) -> String {
    report[attempt]["outcome"]
        .as_str()
        .unwrap_or("missing")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_reads_only_the_sessions_it_names_and_nothing_of_another_prefix_or_account()
-> anyhow::Result<()> {
    let users: &[(&str, &[&str])] = &[
        ("router", &["router"]),
        ("intake", &["worker", "intake"]),
        ("slow", &["worker", "slow"]),
        ("client", &["client"]),
        ("other", &["client", "--prefix", "other"]),
    ];
    let config = with_other_account(&generated_config(users)?);
    let mut system = System::secured(&config, "admin", "admin-pw").await?;
    let router = as_user("router");
    let mut args: Vec<&str> = router.iter().map(String::as_str).collect();
    args.extend(["router", "--default-agent", "intake", "--no-registry"]);
    system.spawn("router", &args, "router started").await?;
    for (agent, work) in [("intake", "0"), ("slow", "60000")] {
        let user = as_user(agent);
        let mut flags: Vec<&str> = user.iter().map(String::as_str).collect();
        flags.extend(["--no-registry", "--no-fallback", "--work-ms", work]);
        system.relay(agent, agent, &flags).await?;
    }
    // Sessions of others, each with a card number in its context.
    let mut others = Vec::new();
    for _ in 0..3 {
        let task = Envelope::task(CARD);
        system.client.submit(&task).await?;
        others.push(task.session);
    }
    for session in &others {
        let end = system
            .client
            .wait(*session, Duration::from_secs(30))
            .await?;
        assert_eq!(end.kind, EventType::Completed);
    }

    // The client's own work goes through: send and wait, watch a session
    // it knows, cancel one.
    let sent = ok_as(
        &system,
        "client",
        &["send", "--wait", "--json", "where is my order?"],
    )?;
    let sent: serde_json::Value = serde_json::from_slice(&sent.stdout)?;
    assert_eq!(sent["type"], "completed", "{sent}");
    // So does the protocol's Python client, reading through the router.
    let url = system
        .server_url()
        .replacen("nats://", "nats://client:client-pw@", 1);
    let python = system.python_client(&[
        "--url",
        &url,
        "--inbox-prefix",
        "_INBOX_client",
        "--through-router",
        "a question from Python",
    ])?;
    let said = String::from_utf8_lossy(&python.stdout);
    assert!(
        python.status.success() && said.contains("completed"),
        "{said}{}",
        String::from_utf8_lossy(&python.stderr)
    );
    let mine = others[0].to_string();
    let watched = ok_as(&system, "client", &["watch", &mine])?;
    let watched = String::from_utf8_lossy(&watched.stdout);
    assert!(watched.contains("completed"), "{watched}");
    let slow = ok_as(
        &system,
        "client",
        &["send", "--to", "slow", "--json", "take your time"],
    )?;
    let slow: serde_json::Value = serde_json::from_slice(&slow.stdout)?;
    let slow: uuid::Uuid = slow["session"].as_str().unwrap_or_default().parse()?;
    ok_as(&system, "client", &["cancel", &slow.to_string()])?;
    let end = system.client.wait(slow, Duration::from_secs(10)).await?;
    assert_eq!(
        (end.kind, end.reason),
        (EventType::Failed, Some(baton_proto::Reason::Cancelled))
    );

    // The same calls, made by a user that may: the snoop reads what it
    // asks for, so a refusal below is the permissions' doing.
    let admin = snoop(&system, "admin", others[0])?;
    println!("admin: {admin}");
    assert_eq!(
        outcome(&admin, "consumer_on_every_session"),
        "read",
        "{admin}"
    );
    assert!(
        admin["stream_info_lists_sessions"]["subjects"].as_u64() >= Some(4),
        "{admin}"
    );

    // The client: every JetStream read of sessions, claims and cancels is
    // refused; the router answers only for a session id.
    let client = snoop(&system, "client", others[0])?;
    println!("client: {client}");
    for attempt in [
        "consumer_on_every_session",
        "consumer_without_filter_in_subject",
        "stream_info_lists_sessions",
        "get_event_by_sequence",
        "direct_get_any_session",
        "get_claim_by_sequence",
        "consumer_on_claims",
        "get_cancel_by_sequence",
        "subscribe_every_session",
        "subscribe_live",
    ] {
        assert_eq!(outcome(&client, attempt), "denied", "{attempt}: {client}");
    }
    for attempt in [
        "router_read_star",
        "router_read_gt",
        "router_read_not_an_id",
    ] {
        let got = outcome(&client, attempt);
        assert!(got == "error" || got == "denied", "{attempt}: {client}");
    }
    assert!(
        client["router_read_not_an_id"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("does not end in a session id")),
        "{client}"
    );
    assert_eq!(outcome(&client, "router_read_known"), "read", "{client}");
    assert_eq!(
        client["router_read_known"]["types"][0], "completed",
        "{client}"
    );

    // A client of another prefix: nothing of this one, not even by id.
    let other = snoop(&system, "other", others[0])?;
    println!("other prefix: {other}");
    for (attempt, got) in other.as_object().into_iter().flatten() {
        assert_eq!(got["outcome"], "denied", "{attempt}: {other}");
    }
    let watched = run_as(&system, "other", &["watch", "--prefix", "other", &mine])?;
    let said = String::from_utf8_lossy(&watched.stderr);
    assert!(
        !watched.status.success() && said.contains("no router answers other.session.read."),
        "{said}{}",
        String::from_utf8_lossy(&watched.stdout)
    );

    // A user of another account: the streams and the router do not exist there.
    let stranger = snoop(&system, "stranger", others[0])?;
    println!("other account: {stranger}");
    for (attempt, got) in stranger.as_object().into_iter().flatten() {
        assert_ne!(got["outcome"], "read", "{attempt}: {stranger}");
    }
    assert_eq!(
        outcome(&stranger, "router_read_known"),
        "no_responders",
        "{stranger}"
    );
    Ok(())
}

//! `baton doctor` against real servers: a misconfigured one yields exactly
//! the expected findings, a server without JetStream is named, and workers
//! widen a duplicate window that does not cover their redeliveries.
//! (The cluster's replica findings are in `cluster.rs`.)

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream;

use crate::util::System;

/// A server with a small max_payload, background fsync (the default), a
/// system account, and the account Baton runs in.
const CONFIG: &str = r"
max_payload: 65536
system_account: SYS
accounts {
  SYS { users: [ { user: sys, password: sys-pw } ] }
  BATON {
    jetstream: enabled
    users: [ { user: admin, password: admin-pw } ]
  }
}
";

/// Runs `baton doctor --json ARGS` and returns its exit code and report.
fn doctor(system: &System, args: &[&str]) -> anyhow::Result<(Option<i32>, serde_json::Value)> {
    let mut all = vec!["doctor", "--json"];
    all.extend(args);
    let output = tokio::task::block_in_place(|| system.baton(&all).output())?;
    let report = serde_json::from_slice(&output.stdout).map_err(|err| {
        anyhow::anyhow!(
            "{err}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    Ok((output.status.code(), report))
}

/// The findings that need action: (check, level, subject).
fn problems(report: &serde_json::Value) -> BTreeSet<(String, String, String)> {
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["level"] == "warn" || f["level"] == "error")
        .map(|f| (text(&f["check"]), text(&f["level"]), text(&f["subject"])))
        .collect()
}

fn message<'a>(report: &'a serde_json::Value, check: &str) -> &'a str {
    report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["check"] == check && f["level"] != "ok")
        .and_then(|f| f["message"].as_str())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_each_misconfiguration_of_a_server_and_its_fix() -> anyhow::Result<()> {
    let mut system = System::secured(CONFIG, "admin", "admin-pw").await?;
    system.router(&["--no-registry"]).await?;
    system.registry("registry").await?;
    system.agent("triage", "triage", "triage", 1, &[]).await?;
    let everyone = baton_proto::LookupRequest::default();
    let live = |answer: &baton_proto::LookupResponse| {
        crate::util::names(answer).contains(&"triage".to_owned())
    };
    system
        .lookup_until(&everyone, Duration::from_secs(10), live)
        .await?;
    let js = jetstream::new(system.nats.clone());
    // Misconfigure: narrow one window again, and leave an agent type's
    // consumer with a task in it and no worker.
    let mut events = events_config(&js).await?;
    events.duplicate_window = Duration::from_secs(60);
    js.update_stream(&events).await?;
    js.get_stream("BATON_TASKS")
        .await?
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("agent-ghost".to_owned()),
            filter_subject: "baton.agent.ghost".to_owned(),
            ack_wait: Duration::from_secs(30),
            max_deliver: 21,
            ..Default::default()
        })
        .await?;
    js.publish("baton.agent.ghost", "forgotten".into())
        .await?
        .await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let system_url = system
        .server
        .url()
        .replacen("nats://", "nats://sys:sys-pw@", 1);
    let args = [
        "--system-url",
        &system_url,
        "--claim-threshold",
        "70000",
        "--stale-after-secs",
        "1",
    ];
    let (code, report) = doctor(&system, &args)?;
    assert_eq!(code, Some(1), "{report:#}");
    let server = report["findings"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        server.starts_with("1 server(s), nats-server 2."),
        "{server}"
    );
    let expected: BTreeSet<(String, String, String)> = [
        ("dedup", "warn", "BATON_EVENTS"),
        ("payload", "error", ""),
        ("consumers", "error", "agent-ghost"),
    ]
    .into_iter()
    .map(|(c, l, s)| (c.to_owned(), l.to_owned(), s.to_owned()))
    .collect();
    let found = problems(&report);
    let fsync: Vec<_> = found.iter().filter(|p| p.0 == "fsync").cloned().collect();
    assert_eq!(fsync.len(), 1, "{report:#}");
    assert_eq!(fsync[0].1, "warn");
    let rest: BTreeSet<_> = found.into_iter().filter(|p| p.0 != "fsync").collect();
    assert_eq!(rest, expected, "{report:#}");
    assert!(message(&report, "dedup").contains("10m30s"), "{report:#}");
    assert!(
        message(&report, "dedup").contains("agent-triage"),
        "{report:#}"
    );
    assert!(message(&report, "fsync").contains("every 2m"), "{report:#}");
    assert!(message(&report, "payload").contains("65536"), "{report:#}");
    assert!(
        message(&report, "consumers").contains("1 task(s)"),
        "{report:#}"
    );
    assert_eq!(report["errors"], 2);
    assert_eq!(report["warnings"], 2);
    // The same as text, each fix below its finding; the password never shows.
    let mut text_args = vec!["doctor"];
    text_args.extend(args);
    let text = tokio::task::block_in_place(|| system.baton(&text_args).output())?;
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("fix: set `jetstream { sync_interval: always }`"),
        "{stdout}"
    );
    assert!(stdout.contains("2 error(s), 2 warning(s)"), "{stdout}");
    let all = format!("{stdout}{}", String::from_utf8_lossy(&text.stderr));
    assert!(
        !all.contains("sys-pw") && !all.contains("admin-pw"),
        "{all}"
    );
    // A restarted worker whose user may update the stream widens the
    // window again, to its ack_wait × max_deliver: 30 s × 21.
    system.process("triage").terminate();
    system.agent("triage-2", "triage", "triage", 1, &[]).await?;
    system
        .lookup_until(&everyone, Duration::from_secs(10), live)
        .await?;
    for name in ["BATON_TASKS", "BATON_EVENTS", "BATON_DLQ"] {
        let window = js
            .get_stream(name)
            .await?
            .cached_info()
            .config
            .duplicate_window;
        assert_eq!(window, Duration::from_secs(630), "{name}");
    }
    // Without the system account the fsync setting is not reported, and
    // doctor says so.
    let (_, report) = doctor(&system, &["--stale-after-secs", "1"])?;
    let found = problems(&report);
    assert_eq!(
        found,
        BTreeSet::from([(
            "consumers".to_owned(),
            "error".to_owned(),
            "agent-ghost".to_owned()
        )]),
        "{report:#}"
    );
    assert!(report["findings"].as_array().is_some_and(|all| {
        all.iter()
            .any(|f| f["check"] == "fsync" && f["level"] == "info")
    }));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_a_server_without_jetstream() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut command = std::process::Command::new(baton_testkit::nats_server_binary()?);
    command.args(["-a", "127.0.0.1", "-p", &port.to_string(), "-n", "plain"]);
    let _server = baton_testkit::ChildProcess::spawn(command, "nats-server")?;
    let url = format!("nats://127.0.0.1:{port}");
    let run = || {
        tokio::task::block_in_place(|| {
            std::process::Command::new(baton_testkit::baton_binary())
                .args([
                    "--nats-url",
                    &url,
                    "doctor",
                    "--json",
                    "--timeout-ms",
                    "1000",
                ])
                .env_remove("NATS_URL")
                .output()
        })
    };
    let output = baton_testkit::eventually(Duration::from_secs(10), || async {
        let output = run()?;
        anyhow::ensure!(
            !output.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(output)
    })
    .await?;
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let found = problems(&report);
    assert!(
        found.contains(&("servers".to_owned(), "error".to_owned(), "plain".to_owned())),
        "{report:#}"
    );
    assert!(
        message(&report, "servers").contains("JetStream is not enabled on plain"),
        "{report:#}"
    );
    assert!(
        found.contains(&("replicas".to_owned(), "error".to_owned(), String::new())),
        "{report:#}"
    );
    Ok(())
}

/// The `storage` findings of a report: (level, subject, message).
fn storage(report: &serde_json::Value) -> Vec<(String, String, String)> {
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    (report["findings"].as_array().into_iter().flatten())
        .filter(|f| f["check"] == "storage")
        .map(|f| (text(&f["level"]), text(&f["subject"]), text(&f["message"])))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_streams_that_hold_text_are_compressed_and_doctor_says_when_one_is_not()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The router opens the streams and the conversations' buckets.
    system.router(&["--no-registry"]).await?;
    let js = jetstream::new(system.nats.clone());
    let compression = |name: &'static str| {
        let js = js.clone();
        async move {
            let stream = js.get_stream(name).await?;
            anyhow::Ok(stream.cached_info().config.compression.clone())
        }
    };
    // The conversations' buckets open just after "router started".
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while js.get_stream("KV_BATON_CONVERSATIONS").await.is_err() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the router opened no conversations bucket within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s2 = Some(jetstream::stream::Compression::S2);
    for name in ["BATON_EVENTS", "BATON_DLQ", "KV_BATON_CONVERSATIONS"] {
        assert_eq!(compression(name).await?, s2, "{name}");
    }
    // The tasks stream is a work queue: nothing stays in it to compress.
    assert_ne!(compression("BATON_TASKS").await?, s2);
    let (_, report) = doctor(&system, &["--stale-after-secs", "600"])?;
    let found = storage(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0].0, "ok", "{report:#}");
    assert!(found[0].2.contains("are compressed (s2)"), "{report:#}");
    // A stream made without compression (here: its setting removed) is
    // named, with the fix; it is not a warning.
    let mut events = events_config(&js).await?;
    events.compression = Some(jetstream::stream::Compression::None);
    js.update_stream(&events).await?;
    let (_, report) = doctor(&system, &["--stale-after-secs", "600"])?;
    let found = storage(&report);
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(
        (found[0].0.as_str(), found[0].1.as_str()),
        ("info", "BATON_EVENTS"),
        "{report:#}"
    );
    assert!(found[0].2.contains("not compressed"), "{report:#}");
    let text_args = ["doctor", "--stale-after-secs", "600"];
    let text = tokio::task::block_in_place(|| system.baton(&text_args).output())?;
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        stdout.contains("fix: `nats stream edit BATON_EVENTS --compression s2`"),
        "{stdout}"
    );
    Ok(())
}

/// The events stream's configuration, to change and put back.
async fn events_config(js: &jetstream::Context) -> anyhow::Result<jetstream::stream::Config> {
    Ok(js
        .get_stream("BATON_EVENTS")
        .await?
        .cached_info()
        .config
        .clone())
}

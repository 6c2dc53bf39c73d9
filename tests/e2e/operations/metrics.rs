//! Metrics after known traffic, scraped from each worker's `--metrics-addr`
//! and parsed by the Prometheus project's Python client: exact counts per
//! agent, outcome, handoff and dead-letter reason, and no session id in
//! any label.

use std::collections::HashMap;
use std::time::Duration;

use baton_proto::{Envelope, EventType};

use crate::util::System;

/// One sample: metric name and labels, and its value.
#[derive(Debug)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: HashMap<String, String>,
    pub(crate) value: f64,
}

/// Starts relay worker `agent` with its metrics on a free port, and
/// returns the port's URL.
async fn worker(system: &mut System, agent: &str, flags: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["--metrics-addr", "127.0.0.1:0"];
    args.extend(flags);
    system.relay(agent, agent, &args).await?;
    metrics_url(system.process(agent).stderr())
}

/// The metrics URL a process logged when it started serving them.
pub(crate) fn metrics_url(log: String) -> anyhow::Result<String> {
    let addr = log
        .lines()
        .find(|line| line.contains("serving metrics"))
        .and_then(|line| line.split("addr=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no metrics address in the log:\n{log}"))?;
    Ok(format!("http://{addr}/metrics"))
}

/// The samples at `url`, as Prometheus' own parser reads them.
pub(crate) fn scrape(url: &str) -> anyhow::Result<Vec<Sample>> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts/scrape.py");
    let output = tokio::task::block_in_place(|| {
        std::process::Command::new("python3")
            .arg(script)
            .arg(url)
            .output()
    })?;
    anyhow::ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)?
        .lines()
        .map(|line| {
            let sample: serde_json::Value = serde_json::from_str(line)?;
            let labels = sample["labels"].as_object().into_iter().flatten();
            Ok(Sample {
                name: sample["name"].as_str().unwrap_or_default().to_owned(),
                labels: labels
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect(),
                value: sample["value"].as_f64().unwrap_or(f64::NAN),
            })
        })
        .collect()
}

/// The value of the sample `name` whose labels include `labels`; 0 if none.
pub(crate) fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_count_outcomes_handoffs_retries_and_dead_letters_exactly() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let alone = "--no-registry";
    let front_url = worker(&mut system, "front", &[alone, "--next", "back"]).await?;
    let front = front_url.clone();
    let back = worker(&mut system, "back", &[alone]).await?;
    let flaky = worker(
        &mut system,
        "flaky",
        &[alone, "--fail-attempts", "2", "--min-backoff-ms", "10"],
    )
    .await?;
    let broken = worker(&mut system, "broken", &[alone, "--fatal", "--no-fallback"]).await?;
    let mut sessions = Vec::new();
    for (agent, count) in [("front", 5), ("flaky", 3), ("broken", 2)] {
        for n in 0..count {
            let task = Envelope::task(format!("{agent} {n}"));
            system
                .client
                .submit_to(&baton_proto::AgentName::new(agent)?, &task)
                .await?;
            sessions.push((agent, task.session));
        }
    }
    for (agent, session) in &sessions {
        let end = system
            .client
            .wait(*session, Duration::from_secs(30))
            .await?;
        let expected = if *agent == "broken" {
            EventType::Failed
        } else {
            EventType::Completed
        };
        assert_eq!(end.kind, expected, "{agent}");
    }
    let front = scrape(&front)?;
    let handoff = [("agent", "front"), ("outcome", "handoff")];
    assert_eq!(value(&front, "baton_messages_total", &handoff), 5.0);
    let route = [("from", "front"), ("to", "back")];
    assert_eq!(value(&front, "baton_handoffs_total", &route), 5.0);
    assert_eq!(
        value(
            &front,
            "baton_agent_duration_seconds_count",
            &[("agent", "front"), ("result", "ok")]
        ),
        5.0
    );
    assert_eq!(
        value(&front, "baton_concurrency", &[("agent", "front")]),
        8.0
    );
    assert_eq!(value(&front, "baton_in_flight", &[("agent", "front")]), 0.0);
    let back = scrape(&back)?;
    assert_eq!(
        value(
            &back,
            "baton_messages_total",
            &[("agent", "back"), ("outcome", "completed")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &back,
            "baton_session_duration_seconds_count",
            &[("outcome", "completed")]
        ),
        5.0
    );
    let flaky = scrape(&flaky)?;
    assert_eq!(
        value(&flaky, "baton_retries_total", &[("agent", "flaky")]),
        6.0
    );
    assert_eq!(
        value(&flaky, "baton_messages_total", &[("outcome", "retrying")]),
        6.0
    );
    assert_eq!(
        value(&flaky, "baton_messages_total", &[("outcome", "completed")]),
        3.0
    );
    assert_eq!(
        value(
            &flaky,
            "baton_agent_duration_seconds_count",
            &[("result", "error")]
        ),
        6.0
    );
    let broken = scrape(&broken)?;
    let fatal = [("agent", "broken"), ("reason", "fatal")];
    assert_eq!(value(&broken, "baton_dead_letters_total", &fatal), 2.0);
    assert_eq!(
        value(&broken, "baton_messages_total", &[("outcome", "failed")]),
        2.0
    );
    assert_eq!(
        value(
            &broken,
            "baton_session_duration_seconds_count",
            &[("outcome", "failed")]
        ),
        2.0
    );
    // The probes: live, and ready while connected; not ready once the server is gone.
    let probe = front_url.replace("/metrics", "");
    assert_eq!(get(&format!("{probe}/healthz")).await?.0, 200);
    assert_eq!(
        get(&format!("{probe}/readyz")).await?,
        (200, "ready\n".to_owned())
    );
    system.server.kill();
    baton_testkit::eventually(Duration::from_secs(20), || async {
        let (status, body) = get(&format!("{probe}/readyz")).await?;
        anyhow::ensure!(
            status == 503 && body.contains("not connected"),
            "{status} {body}"
        );
        Ok(())
    })
    .await?;
    // No label carries a session or envelope id: the cardinality stays bounded.
    for sample in front.iter().chain(&back).chain(&flaky).chain(&broken) {
        for value in sample.labels.values() {
            assert!(
                uuid::Uuid::parse_str(value).is_err(),
                "{} has an id label: {value}",
                sample.name
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn capability_handoffs_count_their_registry_lookups() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let interval = crate::util::HEARTBEAT_MS.to_string();
    let args = [
        "registry",
        "--heartbeat-ms",
        &interval,
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    system
        .spawn("registry", &args, "registry serving lookups")
        .await?;
    let registry = metrics_url(system.process("registry").stderr())?;
    system.agent("refund", "refund", "refunds", 2, &[]).await?;
    let refunds = |answer: &baton_proto::LookupResponse| crate::util::names(answer) == ["refund"];
    let wanted = crate::util::wants(&["refunds"]);
    system
        .lookup_until(&wanted, Duration::from_secs(10), refunds)
        .await?;
    let front = worker(&mut system, "front", &["--next-requires", "refunds"]).await?;
    let before = value(
        &scrape(&registry)?,
        "baton_registry_requests_total",
        &[("result", "answered")],
    );
    for n in 0..3 {
        let task = Envelope::task(format!("refund {n}"));
        let events = system.run("front", &task).await?;
        assert_eq!(
            events.last().map(|e| e.kind.clone()),
            Some(EventType::Completed)
        );
    }
    let front = scrape(&front)?;
    let answered = [("result", "answered")];
    assert_eq!(
        value(&front, "baton_registry_lookups_total", &answered),
        3.0
    );
    assert_eq!(
        value(
            &front,
            "baton_registry_lookup_duration_seconds_count",
            &answered
        ),
        3.0
    );
    assert_eq!(
        value(
            &front,
            "baton_registry_lookups_total",
            &[("result", "unanswered")]
        ),
        0.0
    );
    let route = [("from", "front"), ("to", "refund")];
    assert_eq!(value(&front, "baton_handoffs_total", &route), 3.0);
    // The replica answered those 3 (and the test's own lookups before).
    let registry = scrape(&registry)?;
    let served = value(&registry, "baton_registry_requests_total", &answered);
    assert_eq!(served - before, 3.0, "{registry:?}");
    assert_eq!(
        value(
            &registry,
            "baton_registry_requests_total",
            &[("result", "bad_request")]
        ),
        0.0
    );
    Ok(())
}

/// GETs `url` (plain HTTP), expecting 200 and a JSON body (nats-server's
/// monitoring endpoints).
pub(crate) async fn get_json(url: &str) -> anyhow::Result<serde_json::Value> {
    let (status, body) = get(url).await?;
    anyhow::ensure!(status == 200, "{status}: {body}");
    Ok(serde_json::from_str(&body)?)
}

/// GETs `url` (plain HTTP): the status and the body.
pub(crate) async fn get(url: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let status = answer
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .parse()?;
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

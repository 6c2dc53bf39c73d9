//! A real 3-node JetStream cluster: `--replicas` reaches every stream and
//! bucket Baton creates, and a server list connects to any node.

use std::time::Duration;

use async_nats::ServerAddr;
use baton_proto::{Envelope, EventType};
use baton_testkit::{ChildProcess, NatsCluster, baton_binary, eventually};

use crate::util::example;

/// `baton ARGS` against the whole cluster, with `BATON_REPLICAS=3` (a
/// `--replicas` flag in ARGS wins).
fn baton(urls: &str, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(baton_binary());
    command
        .args(["--nats-url", urls])
        .env("BATON_REPLICAS", "3")
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("NATS_URL");
    command
}

/// Relay workers intake → work → finish (16 at a time, no registry, with
/// `extra` flags) on the cluster, and `sessions` tasks for them.
async fn chain(
    urls: &str,
    extra: &[&'static str],
    sessions: usize,
) -> anyhow::Result<(Vec<ChildProcess>, Vec<Envelope>)> {
    let worker = |agent: &'static str, next: Option<&'static str>| {
        let mut args = vec![
            "worker",
            agent,
            "--relay",
            "--concurrency",
            "16",
            "--no-registry",
        ];
        args.extend(extra);
        args.extend(next.map(|next| ["--next", next]).into_iter().flatten());
        (agent, args)
    };
    let workers = [
        worker("intake", Some("work")),
        worker("work", Some("finish")),
        worker("finish", None),
    ];
    let processes = start_workers(urls, &workers).await?;
    let tasks = (0..sessions)
        .map(|n| Envelope::task(format!("session {n}")))
        .collect();
    Ok((processes, tasks))
}

/// A 3-node cluster, and a client of all its nodes once JetStream has a leader.
async fn started_cluster() -> anyhow::Result<(NatsCluster, async_nats::Client)> {
    let cluster = tokio::task::spawn_blocking(|| NatsCluster::start(3)).await??;
    let addrs = cluster
        .nodes
        .iter()
        .map(|node| node.url().parse::<ServerAddr>())
        .collect::<Result<Vec<_>, _>>()?;
    let nats = async_nats::ConnectOptions::new()
        .max_reconnects(None)
        .connect(addrs)
        .await?;
    let js = async_nats::jetstream::new(nats.clone());
    // The cluster elects its JetStream leader first.
    eventually(Duration::from_secs(30), || async {
        js.query_account()
            .await
            .map(drop)
            .map_err(anyhow::Error::from)
    })
    .await?;
    Ok((cluster, nats))
}

/// Starts `baton` with each of `workers` (label, arguments) against the
/// cluster, and waits until every one has started.
async fn start_workers(
    urls: &str,
    workers: &[(&str, Vec<&str>)],
) -> anyhow::Result<Vec<ChildProcess>> {
    let mut processes = Vec::new();
    for (label, args) in workers {
        processes.push(ChildProcess::spawn(baton(urls, args), label)?);
    }
    for process in &mut processes {
        eventually(Duration::from_secs(60), || {
            let started = process.stderr().contains("worker started");
            let why = format!("{} not started:\n{}", process.label(), process.output());
            std::future::ready(if started {
                Ok(())
            } else {
                Err(anyhow::anyhow!(why))
            })
        })
        .await?;
    }
    Ok(processes)
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_reach_every_stream_and_bucket_on_a_cluster() -> anyhow::Result<()> {
    let (cluster, nats) = started_cluster().await?;
    let urls = cluster.urls();
    let js = async_nats::jetstream::new(nats);
    let spec = example("support/human_support.toml");
    let spec = spec.to_string_lossy();
    let parent = vec![
        "worker",
        "parent",
        "--relay",
        "--delegate",
        "child",
        "--no-fallback",
    ];
    let workers = [
        ("parent", parent),
        ("child", vec!["worker", "child", "--relay", "--no-fallback"]),
        ("human", vec!["worker", "--spec", &spec, "--no-registry"]),
    ];
    // An earlier process created the streams with one replica: the R3
    // workers raise them in place.
    let early = vec!["--replicas", "1", "worker", "early", "--relay"];
    let _early = start_workers(&urls, &[("early", early)]).await?;
    let mut tasks = js.get_stream("BATON_TASKS").await?;
    assert_eq!(tasks.info().await?.config.num_replicas, 1);
    let processes = start_workers(&urls, &workers).await?;
    // A task large enough to be claim-checked, delegated to a child: it
    // creates the claim-check and the join buckets.
    let text = "a long conversation ".repeat(40_000);
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), &text)?;
    let path = file.path().to_string_lossy().into_owned();
    let sent = tokio::task::block_in_place(|| {
        baton(
            &urls,
            &[
                "send", "--to", "parent", "--direct", "--file", &path, "--wait",
            ],
        )
        .output()
    })?;
    // Exit 0: the session completed.
    let stdout = String::from_utf8_lossy(&sent.stdout);
    let logs: String = processes.iter().map(ChildProcess::output).collect();
    assert!(
        sent.status.success(),
        "{stdout}\n{}\n{logs}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let buckets = [
        "BATON_TASKS",
        "BATON_EVENTS",
        "BATON_DLQ",
        "KV_BATON_JOINS",
        "KV_BATON_INBOX",
        "OBJ_BATON_CLAIMS",
    ];
    for name in buckets {
        let mut stream = js.get_stream(name).await?;
        let info = stream.info().await?;
        assert_eq!(info.config.num_replicas, 3, "{name}");
        let cluster = info.cluster.as_ref().map_or(0, |c| c.replicas.len());
        assert_eq!(cluster, 2, "{name}: a leader and two followers");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn more_replicas_than_servers_is_an_error_that_names_the_fix() -> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(baton_testkit::NatsServer::start).await??;
    let output = tokio::task::block_in_place(|| {
        baton(server.url(), &["worker", "solo", "--relay"]).output()
    })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot get or create stream BATON_TASKS with 3 replica(s)"),
        "{stderr}"
    );
    assert!(stderr.contains("--replicas does not exceed"), "{stderr}");
    Ok(())
}

/// The index of the node named `name` (`n1` is 0).
fn node_index(name: &str) -> anyhow::Result<usize> {
    let number: usize = name.trim_start_matches('n').parse()?;
    Ok(number - 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn losing_a_follower_then_the_tasks_leader_loses_and_doubles_nothing() -> anyhow::Result<()> {
    const SESSIONS: usize = 300;
    let (mut cluster, nats) = started_cluster().await?;
    let urls = cluster.urls();
    let js = async_nats::jetstream::new(nats.clone());
    // A message whose ack was lost with a node comes back after ack_wait.
    let (_processes, tasks) = chain(&urls, &["--ack-wait-secs", "5"], SESSIONS).await?;
    let client = baton_client::Client::new(nats.clone(), baton_proto::Subjects::default());
    let intake = baton_proto::AgentName::new("intake")?;
    let leader = || leader_of(&js, "BATON_TASKS");
    // A third of the sessions, then a follower dies; a third, then it comes
    // back and the leader of BATON_TASKS dies; the rest, then it comes back.
    for (round, part) in tasks.chunks(SESSIONS / 3).enumerate() {
        for task in part {
            client.submit_to(&intake, task).await?;
        }
        let at_leader = leader().await?;
        let victim = match round {
            0 => (at_leader + 1) % 3,
            1 => at_leader,
            _ => break,
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.nodes[victim].kill();
        println!(
            "round {round}: killed n{} (the leader was n{})",
            victim + 1,
            at_leader + 1
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokio::task::block_in_place(|| cluster.nodes[victim].restart())?;
        eventually(Duration::from_secs(60), || async {
            leader().await.map(drop)
        })
        .await?;
    }
    let by_session = eventually(Duration::from_secs(180), || async {
        let mut by_session: std::collections::HashMap<uuid::Uuid, Vec<baton_proto::Event>> =
            std::collections::HashMap::new();
        for event in all_events(&js).await? {
            by_session.entry(event.session).or_default().push(event);
        }
        let ended = tasks
            .iter()
            .filter(|task| {
                by_session
                    .get(&task.session)
                    .is_some_and(|events| events.iter().any(|e| e.kind.is_terminal()))
            })
            .count();
        anyhow::ensure!(ended == SESSIONS, "{ended} of {SESSIONS} ended");
        Ok(by_session)
    })
    .await?;
    let (mut lost, mut doubled, mut terminals) = (0, 0, 0);
    for task in &tasks {
        let events = &by_session[&task.session];
        let count = |kind: EventType| events.iter().filter(|e| e.kind == kind).count();
        if count(EventType::Completed) != 1 {
            lost += 1;
            if let Some(end) = events.iter().find(|e| e.kind.is_terminal()) {
                println!(
                    "not completed: {:?} {:?} {:?} at {:?}",
                    end.kind, end.reason, end.detail, end.agent
                );
            }
        }
        doubled += usize::from(count(EventType::Handoff) > 2);
        terminals += usize::from(events.iter().filter(|e| e.kind.is_terminal()).count() != 1);
    }
    println!(
        "node loss: {SESSIONS} sessions, {lost} lost, {doubled} with a doubled handoff, {terminals} without exactly one terminal event"
    );
    assert_eq!((lost, doubled, terminals), (0, 0, 0));
    Ok(())
}

/// Every stored event, in stream order.
async fn all_events(
    js: &async_nats::jetstream::Context,
) -> anyhow::Result<Vec<baton_proto::Event>> {
    Ok(stored(js)
        .await?
        .into_iter()
        .map(|(event, _)| event)
        .collect())
}

/// Every stored event with when it was stored (the server's timestamp,
/// unix ms), in stream order; the leader-loss probe's writes (on the nil
/// session) left out.
async fn stored(
    js: &async_nats::jetstream::Context,
) -> anyhow::Result<Vec<(baton_proto::Event, u64)>> {
    use baton_proto::Wire;
    use futures::StreamExt;
    let mut stream = js.get_stream("BATON_EVENTS").await?;
    let last = stream.info().await?.state.last_sequence;
    let mut events = Vec::new();
    if last == 0 {
        return Ok(events);
    }
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig::default())
        .await?;
    let mut messages = consumer.messages().await?;
    let probe = uuid::Uuid::nil().to_string();
    while let Some(message) = messages.next().await {
        let message = message?;
        let info = message.info().map_err(|e| anyhow::anyhow!("{e}"))?;
        let (seq, at) = (info.stream_sequence, info.published);
        if !message.subject.ends_with(&probe) {
            let at = u64::try_from(at.unix_timestamp_nanos() / 1_000_000)?;
            events.push((baton_proto::Event::from_msgpack(&message.payload)?, at));
        }
        if seq >= last {
            break;
        }
    }
    Ok(events)
}

/// The index of the node leading `stream`.
async fn leader_of(js: &async_nats::jetstream::Context, stream: &str) -> anyhow::Result<usize> {
    let info = js.get_stream(stream).await?.info().await?.clone();
    node_index(&info.cluster.and_then(|c| c.leader).unwrap_or_default())
}

#[test]
fn the_deploy_configs_pass_the_servers_own_check() -> anyhow::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let mut configs = vec![root.join("nats-server.conf")];
    for node in ["n1", "n2", "n3"] {
        configs.push(root.join("cluster").join(format!("{node}.conf")));
    }
    let bin = baton_testkit::nats_server_binary()?;
    for config in configs {
        // `-t` checks the file and exits; relative paths resolve from `deploy/`.
        let output = std::process::Command::new(&bin)
            .arg("-c")
            .arg(&config)
            .arg("-t")
            .current_dir(&root)
            .output()?;
        assert!(
            output.status.success(),
            "{}: {}{}",
            config.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

#[test]
fn the_secured_deploy_config_holds_the_generated_blocks_and_passes_the_check() -> anyhow::Result<()>
{
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/secured");
    let config = std::fs::read_to_string(root.join("nats-server.conf"))?;
    let roles: [&[&str]; 6] = [
        &["router"],
        &["registry"],
        &["client"],
        &["operator"],
        &["worker", "refund", "--to", "human_support"],
        &["worker", "human_support", "--human", "--to", "refund"],
    ];
    for role in roles {
        let output = std::process::Command::new(baton_binary())
            .arg("permissions")
            .args(role)
            .output()?;
        assert!(output.status.success());
        let block: String = String::from_utf8(output.stdout)?
            .lines()
            .map(|line| format!("        {line}\n"))
            .collect();
        assert!(
            config.contains(&block),
            "deploy/secured is out of date for {role:?}:\n{block}"
        );
    }
    let mut check = std::process::Command::new(baton_testkit::nats_server_binary()?);
    check.arg("-c").arg(root.join("nats-server.conf")).arg("-t");
    for user in [
        "ROUTER",
        "REGISTRY",
        "CLIENT",
        "OPERATOR",
        "REFUND",
        "HUMAN_SUPPORT",
    ] {
        check.env(format!("BATON_{user}_PASSWORD"), "not-a-real-password");
    }
    let output = check.output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_finds_the_cluster_from_one_node_and_flags_single_replica_streams()
-> anyhow::Result<()> {
    let (mut cluster, nats) = started_cluster().await?;
    let first = cluster.nodes[0].url().to_owned();
    // A stream made with one replica, as before --replicas existed.
    let js = async_nats::jetstream::new(nats.clone());
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "BATON_DLQ".to_owned(),
        subjects: vec!["baton.dlq.>".to_owned()],
        num_replicas: 1,
        ..Default::default()
    })
    .await?;
    let doctor = |urls: &str| -> anyhow::Result<serde_json::Value> {
        let output = tokio::task::block_in_place(|| {
            baton(urls, &["doctor", "--json", "--timeout-ms", "1000"]).output()
        })?;
        assert_eq!(
            output.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(serde_json::from_slice(&output.stdout)?)
    };
    // Given one node, it finds all three through the cluster.
    let report = doctor(&first)?;
    let findings = report["findings"].as_array().cloned().unwrap_or_default();
    let servers = findings[0]["message"].as_str().unwrap_or_default();
    assert!(servers.starts_with("3 server(s)"), "{report:#}");
    let flagged: Vec<_> = findings
        .iter()
        .filter(|f| f["check"] == "replicas" && f["level"] == "warn")
        .collect();
    assert_eq!(flagged.len(), 1, "{report:#}");
    assert_eq!(flagged[0]["subject"], "BATON_DLQ");
    assert!(
        flagged[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1 replica(s) on a 3-node cluster")
    );
    assert!(
        flagged[0]["fix"]
            .as_str()
            .unwrap_or_default()
            .contains("--replicas 3")
    );
    // A node that stops answering is named.
    let gone = cluster.nodes[2]
        .url()
        .trim_start_matches("nats://")
        .to_owned();
    cluster.nodes[2].kill();
    let report = doctor(&cluster.urls())?;
    let down = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["check"] == "servers" && f["level"] == "error" && f["subject"] == gone.as_str());
    assert!(down, "{report:#}");
    Ok(())
}

/// When each session's first terminal event was stored (the server's
/// timestamp, unix ms), and how many terminal events each has; and when
/// each event was stored.
type Ends = (
    std::collections::HashMap<uuid::Uuid, (u64, usize)>,
    Vec<u64>,
);

async fn ends_stored(js: &async_nats::jetstream::Context) -> anyhow::Result<Ends> {
    let (mut ends, mut times) = (std::collections::HashMap::new(), Vec::new());
    for (event, at) in stored(js).await? {
        times.push(at);
        if event.kind.is_terminal() {
            ends.entry(event.session).or_insert((at, 0)).1 += 1;
        }
    }
    Ok((ends, times))
}

/// The `q`-quantile of `sorted`.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Kills the leader of `stream` while sessions run on three-hop chains at
/// the default settings, and reports how long after the kill the sessions
/// in flight then ended (figures in docs/operators/cluster.md).
async fn leader_loss(stream: &str) -> anyhow::Result<()> {
    const SESSIONS: usize = 150;
    let (mut cluster, nats) = started_cluster().await?;
    let urls = cluster.urls();
    let js = async_nats::jetstream::new(nats.clone());
    let (_processes, tasks) = chain(&urls, &["--work-ms", "500"], SESSIONS).await?;
    let client = baton_client::Client::new(nats.clone(), baton_proto::Subjects::default());
    let intake = baton_proto::AgentName::new("intake")?;
    for task in &tasks {
        client.submit_to(&intake, task).await?;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let leader = leader_of(&js, stream).await?;
    let killed_at = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis(),
    )?;
    // A probe that writes to the stream every 50 ms, each write given
    // 500 ms: when the server takes writes again, whatever Baton does.
    let probe_subject = if stream == "BATON_TASKS" {
        "baton.agent._probe".to_owned()
    } else {
        format!("baton.events.{}", uuid::Uuid::nil())
    };
    cluster.nodes[leader].kill();
    let killed = std::time::Instant::now();
    let probe = {
        let js = js.clone();
        tokio::spawn(async move {
            loop {
                let sent = js.publish(probe_subject.clone(), "probe".into()).await;
                if let Ok(ack) = sent
                    && tokio::time::timeout(Duration::from_millis(500), ack)
                        .await
                        .is_ok_and(|ack| ack.is_ok())
                {
                    return killed.elapsed();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let probed = probe.await?;
    let ends = eventually(Duration::from_secs(180), || async {
        let (ends, stored) = ends_stored(&js).await?;
        let ended = tasks
            .iter()
            .filter(|t| ends.contains_key(&t.session))
            .count();
        anyhow::ensure!(ended == SESSIONS, "{ended} of {SESSIONS} ended");
        Ok((ends, stored))
    })
    .await?;
    let (ends, stored) = ends;
    // The first event stored after the kill: when the events stream took
    // writes again.
    let resumed = stored
        .iter()
        .filter(|&&at| at > killed_at)
        .min()
        .map_or(0, |at| at - killed_at);
    let mut after: Vec<u64> = tasks
        .iter()
        .map(|t| ends[&t.session].0)
        .filter(|&at| at > killed_at)
        .map(|at| at - killed_at)
        .collect();
    after.sort_unstable();
    let doubled = tasks.iter().filter(|t| ends[&t.session].1 != 1).count();
    println!(
        "leader of {stream} (n{}) killed: the server took a write again after {} ms, Baton's first event was stored after {} ms; {} of {SESSIONS} sessions ended after the kill; \
         ms after the kill: p50 {} p90 {} p99 {} max {}; {doubled} without exactly one end",
        leader + 1,
        probed.as_millis(),
        resumed,
        after.len(),
        quantile(&after, 0.5),
        quantile(&after, 0.9),
        quantile(&after, 0.99),
        after.last().copied().unwrap_or(0),
    );
    assert_eq!(doubled, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_tasks_leader_mid_run_ends_every_session_once() -> anyhow::Result<()> {
    leader_loss("BATON_TASKS").await
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_events_leader_mid_run_ends_every_session_once() -> anyhow::Result<()> {
    leader_loss("BATON_EVENTS").await
}

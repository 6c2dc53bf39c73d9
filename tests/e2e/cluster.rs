//! A real 3-node JetStream cluster: `--replicas` reaches every stream and
//! bucket Baton creates, and a server list connects to any node.

use std::time::Duration;

use async_nats::ServerAddr;
use baton_testkit::{ChildProcess, NatsCluster, baton_binary, eventually};

use crate::util::example;

/// `baton ARGS` against the whole cluster, with `--replicas 3`.
fn baton(urls: &str, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(baton_binary());
    command
        .args(["--nats-url", urls, "--replicas", "3"])
        .args(args)
        .env("RUST_LOG", "info")
        .env_remove("NATS_URL");
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_reach_every_stream_and_bucket_on_a_cluster() -> anyhow::Result<()> {
    let cluster = tokio::task::spawn_blocking(|| NatsCluster::start(3)).await??;
    let urls = cluster.urls();
    let addrs = cluster
        .nodes
        .iter()
        .map(|node| node.url().parse::<ServerAddr>())
        .collect::<Result<Vec<_>, _>>()?;
    let nats = async_nats::connect(addrs).await?;
    let js = async_nats::jetstream::new(nats.clone());
    // The cluster elects its JetStream leader first.
    eventually(Duration::from_secs(30), || async {
        js.query_account()
            .await
            .map(drop)
            .map_err(anyhow::Error::from)
    })
    .await?;
    let spec = example("support/human_support.toml");
    let spec = spec.to_string_lossy();
    let mut processes = Vec::new();
    for (label, args) in [
        (
            "parent",
            vec![
                "worker",
                "parent",
                "--relay",
                "--delegate",
                "child",
                "--no-fallback",
            ],
        ),
        ("child", vec!["worker", "child", "--relay", "--no-fallback"]),
        ("human", vec!["worker", "--spec", &spec, "--no-registry"]),
    ] {
        let process = ChildProcess::spawn(baton(&urls, &args), label)?;
        processes.push(process);
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

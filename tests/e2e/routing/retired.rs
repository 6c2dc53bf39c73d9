//! A retired version's workers take nothing more, and say so: in their log
//! and in their readiness probe, while the current version's stay ready.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, Subjects, Version};

use crate::operations::metrics::{get, metrics_url};
use crate::util::{System, wants};

#[tokio::test(flavor = "multi_thread")]
async fn a_retired_version_s_workers_take_nothing_and_say_so_in_log_and_readiness()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system.router(&[]).await?;
    let metrics = ["--metrics-addr", "127.0.0.1:0"];
    for version in ["1", "2"] {
        let flags = [&["--version", version][..], &metrics[..]].concat();
        let label = format!("v{version}");
        system.agent(&label, "helper", "help", 1, &flags).await?;
    }
    let probe = |label: &str, system: &mut System| -> anyhow::Result<String> {
        let log = system.process(label).stderr();
        Ok(metrics_url(log)?.replace("/metrics", "/readyz"))
    };
    let (one, two) = (probe("v1", &mut system)?, probe("v2", &mut system)?);
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            (answer.candidates.iter()).any(|c| c.agent == "helper" && c.versions.len() == 2)
        })
        .await?;
    assert_eq!(get(&one).await?, (200, "ready\n".to_owned()));
    // Version 1 answers, then 2 takes over and 1 is retired.
    system.baton_stdout(&["send", "--to", "helper", "--wait", "hi"])?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    let retired = system.baton_stdout(&["retire", "helper", "1"])?;
    assert!(
        retired.contains("version 1 of helper is retired"),
        "{retired}"
    );
    baton_testkit::eventually(Duration::from_secs(5), || async {
        let (status, body) = get(&one).await?;
        anyhow::ensure!(status == 503, "{status} {body}");
        anyhow::ensure!(
            body == "retired: version 1 of helper takes nothing (`baton retire`); remove this worker\n",
            "{body}"
        );
        Ok(())
    })
    .await?;
    assert_eq!(get(&two).await?, (200, "ready\n".to_owned()));
    system
        .wait_log(
            "v1",
            "this version is retired: this worker takes nothing more",
            Duration::from_secs(5),
        )
        .await?;
    // A task pinned to version 1 waits on its consumer: no worker runs it.
    let mut task = Envelope::task("pinned to a retired version");
    task.versions.insert(
        baton_proto::AgentName::from_static("helper"),
        baton_proto::Version::from_static("1"),
    );
    system
        .client
        .submit_to(&AgentName::new("helper")?, &task)
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = system.client.history(task.session).await?;
    assert!(events.is_empty(), "a retired worker ran it: {events:?}");
    let jetstream = async_nats::jetstream::new(system.nats.clone());
    let consumer = Subjects::version_consumer(&AgentName::new("helper")?, &Version::new("1")?);
    let stream = jetstream
        .get_stream(system.client.subjects().tasks_stream())
        .await?;
    let info = stream.consumer_info(&consumer).await?;
    assert_eq!(
        (info.num_pending, info.num_ack_pending),
        (1, 0),
        "{consumer}"
    );
    // Version 2 still answers.
    system.baton_stdout(&["send", "--to", "helper", "--wait", "still there?"])?;
    Ok(())
}

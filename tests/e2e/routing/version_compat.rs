//! Senders that know no versions: tasks a process of an earlier release
//! puts on a versioned type's own subject (`baton.agent.helper`) are moved
//! by the type's versioned workers to the version each session is pinned
//! to, or the one the rollout chooses: none waits, none is lost or run
//! twice, and one that cannot be read is dead-lettered with its reason.
//! With `./just compat`, workers of the previous release run beside this
//! one: in an unversioned pool, and as senders to a versioned type.

use std::time::Duration;

use baton_proto::{AgentName, DeadLetterReason, Envelope, EventType, Rollout, Subjects, Wire};

use crate::util::{System, wants};

#[tokio::test(flavor = "multi_thread")]
async fn tasks_on_a_versioned_type_s_own_subject_move_to_their_versions_once_each()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    for version in ["1", "2"] {
        let flags = ["--version", version, "--concurrency", "8"];
        system
            .agent(&format!("v{version}"), "helper", "help", 1, &flags)
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            (answer.candidates.iter()).any(|c| c.agent == "helper" && c.versions.len() == 2)
        })
        .await?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut half = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    half.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    // 40 tasks as an earlier release sends them (no pin, the type's own
    // subject), 10 of them pinned to version 1 already, and one that
    // cannot be read.
    let mut sent = Vec::new();
    for i in 0..40 {
        let mut task = Envelope::task(format!("from an older sender {i}"));
        task.to = Some(baton_proto::AgentName::from_static("helper"));
        let expected = if i < 10 {
            task.versions.insert(
                baton_proto::AgentName::from_static("helper"),
                baton_proto::Version::from_static("1"),
            );
            "1".to_owned()
        } else {
            half.choose(&task.session.to_string()).to_string()
        };
        system
            .publish_raw("baton.agent.helper", task.to_msgpack()?)
            .await?;
        sent.push((task.session, expected));
    }
    system
        .publish_raw("baton.agent.helper", b"\x93not an envelope".to_vec())
        .await?;
    let expected: std::collections::HashMap<_, _> = sent.iter().cloned().collect();
    let sessions = sent.into_iter().map(|(session, _)| session).collect();
    let ended = system
        .ended_sessions(sessions, Duration::from_secs(60))
        .await?;
    let mut on = [0, 0];
    for (session, events) in ended {
        let expected = &expected[&session];
        let ends: Vec<_> = events.iter().filter(|e| e.kind.is_terminal()).collect();
        assert_eq!(ends.len(), 1, "{session}: {ends:?}");
        assert_eq!(ends[0].kind, EventType::Completed, "{session}: {ends:?}");
        let ran: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventType::Accepted)
            .collect();
        assert_eq!(ran.len(), 1, "{session} ran {} times", ran.len());
        assert_eq!(
            ran[0].version.as_deref(),
            Some(expected.as_str()),
            "{session}"
        );
        on[usize::from(expected == "2")] += 1;
    }
    assert!(on[0] > 10 && on[1] > 0, "both versions ran them: {on:?}");
    system.settled().await?;
    let letters = system.client.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].reason, DeadLetterReason::Malformed);
    assert_eq!(letters[0].subject, "baton.dlq.helper");
    // Nothing waits on the type's own consumer.
    let jetstream = async_nats::jetstream::new(system.nats.clone());
    let stream = jetstream
        .get_stream(system.client.subjects().tasks_stream())
        .await?;
    let own = stream
        .consumer_info(Subjects::agent_consumer(&AgentName::new("helper")?))
        .await?;
    assert_eq!((own.num_pending, own.num_ack_pending), (0, 0));
    Ok(())
}

/// Runs `n` tasks through the router to `to` and returns, per session, its
/// events once it ended.
async fn through_router(
    system: &System,
    to: &str,
    n: usize,
) -> anyhow::Result<Vec<(uuid::Uuid, Vec<baton_proto::Event>)>> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let mut task = Envelope::task(format!("task {i}"));
        task.to = Some(baton_proto::AgentName::unchecked(to));
        system.client.submit(&task).await?;
        sessions.push(task.session);
    }
    system
        .ended_sessions(sessions, Duration::from_secs(60))
        .await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs a baton of the previous release: run it with `./just compat`"]
async fn a_worker_of_the_previous_release_keeps_working_beside_this_one() -> anyhow::Result<()> {
    // An unversioned deployment: this release's registry and router, and
    // helper's pool of one worker of each release on its one consumer.
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system.router(&[]).await?;
    let flags = ["worker", "helper", "--relay", "--concurrency", "4"];
    let old = [&flags[..], &["--instance", "old"]].concat();
    system.spawn_previous("old", &old, "worker started").await?;
    let new = [&flags[..], &["--instance", "new"]].concat();
    system.spawn("new", &new, "worker started").await?;
    let mut by = std::collections::BTreeMap::<String, usize>::new();
    for (session, events) in through_router(&system, "helper", 60).await? {
        let ends: Vec<_> = events.iter().filter(|e| e.kind.is_terminal()).collect();
        assert_eq!(ends.len(), 1, "{session}: {ends:?}");
        assert_eq!(ends[0].kind, EventType::Completed, "{session}: {ends:?}");
        // The wire is unchanged for it: no event names a version.
        assert!(
            events
                .iter()
                .all(|e| e.version.is_none() && e.versions.is_empty())
        );
        *by.entry(ends[0].instance.clone().unwrap_or_default())
            .or_default() += 1;
    }
    assert_eq!(by.len(), 2, "both releases answered: {by:?}");

    // Then helper is versioned by this release's workers, while the old
    // worker, as a sender, hands front's tasks to helper's own subject:
    // they reach the versions.
    system.process("old").kill9();
    let front = [
        "worker",
        "front",
        "--relay",
        "--next",
        "helper",
        "--instance",
        "front",
    ];
    system
        .spawn_previous("front", &front, "worker started")
        .await?;
    system.process("new").kill9();
    for version in ["1", "2"] {
        let flags = ["--version", version];
        system
            .agent(&format!("v{version}"), "helper", "help", 1, &flags)
            .await?;
    }
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut on = std::collections::BTreeMap::<String, usize>::new();
    for (session, events) in through_router(&system, "front", 40).await? {
        let ends: Vec<_> = events.iter().filter(|e| e.kind.is_terminal()).collect();
        assert_eq!(ends.len(), 1, "{session}: {ends:?}");
        assert_eq!(ends[0].kind, EventType::Completed, "{session}: {ends:?}");
        let helper: Vec<_> = (events.iter())
            .filter(|e| e.agent.as_deref() == Some("helper") && e.kind == EventType::Accepted)
            .collect();
        assert_eq!(
            helper.len(),
            1,
            "{session}: helper ran {} times",
            helper.len()
        );
        *on.entry(helper[0].version.as_deref().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    assert_eq!(on.keys().collect::<Vec<_>>(), ["1", "2"], "{on:?}");
    Ok(())
}

//! Pinning across delegation and teams: with two versions live at 50 %,
//! every child a session delegates to a versioned type goes to the one
//! version the session's id chose, the parent (versioned too) gets every
//! result back on its own version, and a team member serves each session
//! on one version.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType, Rollout};
use futures::StreamExt as _;

use crate::util::{System, wants};

#[tokio::test(flavor = "multi_thread")]
async fn every_delegated_child_and_result_of_a_session_keeps_its_pinned_versions()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    // The lead, versioned too: 1 is current, 2 ramped to 50 %.
    for version in ["1", "2"] {
        let lead = ["--delegate", "helper,helper,helper", "--version", version];
        system
            .relay(&format!("lead{version}"), "lead", &lead)
            .await?;
        let helper = ["--version", version, "--concurrency", "8"];
        system
            .relay(&format!("helper{version}"), "helper", &helper)
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            let both = |agent: &str| {
                (answer.candidates.iter()).any(|c| c.agent == agent && c.versions.len() == 2)
            };
            both("lead") && both("helper")
        })
        .await?;
    for agent in ["lead", "helper"] {
        system.baton_stdout(&["rollout", agent, "--to", "2", "--weight", "50"])?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let half = |agent: &str| {
        let mut rollout = Rollout::first(
            &baton_proto::AgentName::unchecked(agent),
            &baton_proto::Version::from_static("1"),
            0,
        );
        rollout.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
        rollout
    };
    let lead = AgentName::new("lead")?;
    let mut sessions = Vec::new();
    for i in 0..40 {
        let task = Envelope::task(format!("split {i}"));
        system.client.submit_to(&lead, &task).await?;
        sessions.push(task.session);
    }
    let ended = system
        .ended_sessions(sessions, Duration::from_secs(90))
        .await?;
    let mut shares: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (session, events) in ended {
        let last = events.last().expect("events");
        assert_eq!(last.kind, EventType::Completed, "{session}: {last:?}");
        let delegated = events.iter().filter(|e| e.kind == EventType::Delegated);
        assert_eq!(delegated.count(), 3, "{session}");
        for agent in ["lead", "helper"] {
            let expected = half(agent).choose(&session.to_string()).to_string();
            let named: Vec<Option<&str>> = (events.iter())
                .filter(|e| e.agent.as_deref() == Some(agent))
                .map(|e| e.version.as_deref())
                .collect();
            // The lead delegates, hears three results and completes; each
            // helper child runs once.
            assert!(named.len() >= 3, "{session} {agent}: {named:?}");
            assert!(
                named.iter().all(|v| *v == Some(expected.as_str())),
                "{session} {agent} ran on {named:?}, pinned to {expected}"
            );
            assert_eq!(
                last.versions.get(agent).map(|v| v.as_str()),
                Some(expected.as_str()),
                "{last:?}"
            );
            *shares.entry((agent.to_owned(), expected)).or_default() += 1;
        }
    }
    assert_eq!(
        shares.len(),
        4,
        "both versions of each type ran: {shares:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_member_with_two_versions_serves_each_session_on_one() -> anyhow::Result<()> {
    // The teams example, with its researcher (a named member that forms a
    // sub-team of its own) deployed as versions 1 and 2, ramped to 50 %.
    let dir = tempfile::tempdir()?;
    let example = crate::util::example("teams");
    for entry in std::fs::read_dir(&example)? {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            std::fs::copy(&path, dir.path().join(name))?;
        }
    }
    let researcher = std::fs::read_to_string(dir.path().join("researcher.toml"))?;
    let mut system = System::start().await?;
    system.registry("r1").await?;
    for role in ["lead", "writer_a", "writer_b", "reviewer", "fact_checker"] {
        let spec = dir.path().join(format!("{role}.toml"));
        system.spec_worker(role, &spec, &[]).await?;
    }
    for version in ["1", "2"] {
        let spec = dir.path().join(format!("researcher-{version}.toml"));
        let text = researcher.replacen(
            "name = \"researcher\"",
            &format!("name = \"researcher\"\nversion = \"{version}\""),
            1,
        );
        std::fs::write(&spec, text)?;
        system
            .spec_worker(&format!("researcher{version}"), &spec, &[])
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            let researchers = (answer.candidates.iter())
                .any(|c| c.agent == "researcher" && c.versions.len() == 2);
            researchers && answer.candidates.len() >= 6
        })
        .await?;
    system.baton_stdout(&["rollout", "researcher", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut half = Rollout::first(
        &baton_proto::AgentName::from_static("researcher"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    half.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    let lead = AgentName::new("lead")?;
    let mut sessions = Vec::new();
    for i in 0..12 {
        let task = Envelope::task(format!("How long does pasta {i} take?"));
        system.client.submit_to(&lead, &task).await?;
        sessions.push(task.session);
    }
    let mut shares: BTreeMap<String, usize> = BTreeMap::new();
    for (session, events) in system
        .ended_sessions(sessions, Duration::from_secs(90))
        .await?
    {
        let last = events.last().expect("events");
        assert_eq!(last.kind, EventType::Completed, "{session}: {last:?}");
        let expected = half.choose(&session.to_string()).to_string();
        let named: Vec<Option<&str>> = (events.iter())
            .filter(|e| e.agent.as_deref() == Some("researcher"))
            .map(|e| e.version.as_deref())
            .collect();
        assert!(!named.is_empty(), "{session}: the researcher never ran");
        assert!(
            named.iter().all(|v| *v == Some(expected.as_str())),
            "{session}: the researcher ran on {named:?}, pinned to {expected}"
        );
        assert_eq!(
            last.versions.get("researcher").map(|v| v.as_str()),
            Some(expected.as_str()),
            "{last:?}"
        );
        *shares.entry(expected).or_default() += 1;
    }
    assert_eq!(shares.len(), 2, "both versions had sessions: {shares:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_handoff_to_a_versioned_type_goes_straight_to_its_pinned_version()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.human_support().await?;
    // `helper` is versioned: its first worker makes version 1 current.
    let helper = ["--version", "1", "--no-registry"];
    system.relay("helper1", "helper", &helper).await?;
    let versioned = system.baton_stdout(&["versions", "helper"])?;
    assert!(versioned.contains('1'), "{versioned}");
    // A task for the type's own subject would be moved on by its workers:
    // one hop more, seen here.
    let mut own = system.nats.subscribe("baton.agent.helper").await?;
    let task = Envelope::task("please pass me on");
    let human = AgentName::new("human_support")?;
    system.client.submit_to(&human, &task).await?;
    let waiting = system.waiting(task.session).await?;
    let id = waiting.envelope.expect("the waiting task's id").to_string();
    system.baton_stdout(&["inbox", "reply", &id, "over to you", "--handoff", "helper"])?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let last = events.last().expect("events");
    assert_eq!(last.kind, EventType::Completed, "{events:?}");
    assert_eq!(
        last.versions.get("helper").map(|version| version.as_str()),
        Some("1"),
        "{last:?}"
    );
    let helped: Vec<_> = (events.iter())
        .filter(|e| e.agent.as_deref() == Some("helper"))
        .map(|e| e.version.as_deref())
        .collect();
    assert!(
        !helped.is_empty() && helped.iter().all(|v| *v == Some("1")),
        "{helped:?}"
    );
    let moved = tokio::time::timeout(Duration::from_millis(500), own.next()).await;
    assert!(
        moved.is_err(),
        "the handoff went to the type's own subject: {moved:?}"
    );
    Ok(())
}

//! Versioned deploys: workers of a named version take only their version's
//! work, a rollout shares new sessions by a weight that sticks to each
//! session's id, and `--back` sends new sessions to the previous version at
//! once; the commands refuse bad input with a message that names the fix.

use std::collections::BTreeMap;
use std::time::Duration;

use baton_proto::{Envelope, Event, EventType, Rollout};

use crate::util::{System, wants};

/// Sends `n` tasks straight to `helper` and returns, per session, the
/// version its events name (all of them one version) and the session id.
async fn answered(system: &System, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let helper = baton_proto::AgentName::new("helper")?;
    let mut sessions = Vec::new();
    for i in 0..n {
        let task = Envelope::task(format!("task {i}"));
        system.client.submit_to(&helper, &task).await?;
        sessions.push(task.session);
    }
    let ended = system
        .ended_sessions(sessions, Duration::from_secs(60))
        .await?;
    let mut versions = Vec::new();
    for (session, events) in ended {
        let last: &Event = events.last().expect("a session with events");
        assert_eq!(last.kind, EventType::Completed, "{session}: {last:?}");
        let mut named: Vec<String> = events
            .iter()
            .filter_map(|e| e.version.as_ref().map(ToString::to_string))
            .collect();
        named.dedup();
        assert_eq!(named.len(), 1, "{session} was answered by {named:?}");
        versions.push((named.remove(0), session.to_string()));
    }
    Ok(versions)
}

fn shares(answered: &[(String, String)]) -> BTreeMap<String, usize> {
    let mut shares = BTreeMap::new();
    for (version, _) in answered {
        *shares.entry(version.clone()).or_default() += 1;
    }
    shares
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_shares_new_sessions_by_weight_sticks_to_each_id_and_rolls_back()
-> anyhow::Result<()> {
    // The first version to run is current: a later one waits for a rollout.
    let system = two_versions(false).await?;
    assert_eq!(
        shares(&answered(&system, 20).await?),
        BTreeMap::from([("1".to_owned(), 20)])
    );

    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    // Every process follows the rollout as the server pushes it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let half = answered(&system, 400).await?;
    let on_two = shares(&half).get("2").copied().unwrap_or(0);
    // 50 % of 400 within 3 standard deviations (30).
    assert!(
        (170..=230).contains(&on_two),
        "{on_two} of 400 on version 2"
    );
    // Each session went where the rollout's choice for its id says.
    let mut rollout = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    rollout.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    for (version, session) in &half {
        assert_eq!(rollout.choose(session), version, "session {session}");
    }

    let back = std::time::Instant::now();
    system.baton_stdout(&["rollout", "helper", "--back"])?;
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(back.elapsed())).await;
    assert_eq!(
        shares(&answered(&system, 40).await?),
        BTreeMap::from([("1".to_owned(), 40)])
    );

    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        shares(&answered(&system, 40).await?),
        BTreeMap::from([("2".to_owned(), 40)])
    );

    let shown: serde_json::Value =
        serde_json::from_str(&system.baton_stdout(&["versions", "helper", "--json"])?)?;
    assert_eq!(shown["current"], "2");
    assert_eq!(shown["previous"], "1");
    let rows = shown["versions"].as_array().expect("versions");
    let row = |v: &str| rows.iter().find(|r| r["version"] == v).cloned().expect(v);
    assert_eq!(
        (row("2")["state"].clone(), row("2")["weight"].clone()),
        ("current".into(), 100.into())
    );
    assert_eq!(
        (row("1")["state"].clone(), row("1")["weight"].clone()),
        ("draining".into(), 0.into())
    );
    assert_eq!(row("1")["workers"], 1);
    assert_eq!(row("1")["pending"], 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rollout_commands_refuse_bad_input_naming_the_fix() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system
        .agent("v1", "helper", "help", 1, &["--version", "1"])
        .await?;
    system.agent("plain", "plain", "help", 1, &[]).await?;
    until_helper(&system, |_| true).await?;
    let no_worker = refused(
        &system,
        &["rollout", "helper", "--to", "3", "--weight", "10"],
    )?;
    assert!(
        no_worker.contains("no live worker runs version 3 of helper"),
        "{no_worker}"
    );
    assert!(no_worker.contains("--version 3"), "{no_worker}");
    let unknown = refused(&system, &["rollout", "helpr", "--to", "1"])?;
    assert!(unknown.contains("unknown agent type helpr"), "{unknown}");
    let unversioned = refused(&system, &["versions", "plain"])?;
    assert!(
        unversioned.contains("agent type plain has no versions yet"),
        "{unversioned}"
    );
    let weight = refused(
        &system,
        &["rollout", "helper", "--to", "1", "--weight", "101"],
    )?;
    assert!(weight.contains("101 is not in 0..=100"), "{weight}");
    let label = refused(&system, &["rollout", "helper", "--to", "v1.2"])?;
    assert!(label.contains("invalid version \"v1.2\""), "{label}");
    let worker = refused(
        &system,
        &["worker", "helper", "--relay", "--version", "a b"],
    )?;
    assert!(
        worker.contains("invalid --version: invalid version \"a b\""),
        "{worker}"
    );
    let back = refused(&system, &["rollout", "helper", "--back"])?;
    assert!(
        back.contains("no earlier version to go back to (current: 1)"),
        "{back}"
    );
    Ok(())
}

/// `baton <args>`, which must fail: its stderr.
fn refused(system: &System, args: &[&str]) -> anyhow::Result<String> {
    let output = system.baton(args).output()?;
    assert!(!output.status.success(), "{args:?} succeeded");
    Ok(String::from_utf8(output.stderr)?)
}

/// Waits until the registry knows `helper` and `check` holds for it.
async fn until_helper(
    system: &System,
    check: impl Fn(&baton_proto::Candidate) -> bool,
) -> anyhow::Result<()> {
    let ten = Duration::from_secs(10);
    system
        .lookup_until(&wants(&[]), ten, |answer| {
            (answer.candidates.iter()).any(|c| c.agent == "helper" && check(c))
        })
        .await?;
    Ok(())
}

/// A deployment with a registry (and a router when `router`), and two
/// versions of `helper`, 1 (the first, so current) and 2, each with a live
/// worker the registry knows.
async fn two_versions(router: bool) -> anyhow::Result<System> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    if router {
        system.router(&[]).await?;
    }
    system
        .agent("v1", "helper", "help", 1, &["--version", "1"])
        .await?;
    system
        .agent("v2", "helper", "help", 1, &["--version", "2"])
        .await?;
    until_helper(&system, |c| c.versions.len() == 2).await?;
    Ok(system)
}

/// The version that answered `session`: the one its events name.
pub(crate) async fn answered_by(system: &System, session: &str) -> anyhow::Result<String> {
    let events = system
        .session_events(session.parse()?, Duration::from_secs(30))
        .await?;
    let mut named: Vec<String> = events
        .iter()
        .filter_map(|e| e.version.as_ref().map(ToString::to_string))
        .collect();
    named.dedup();
    anyhow::ensure!(named.len() == 1, "{session} was answered by {named:?}");
    Ok(named.remove(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_keeps_its_version_after_a_rollout_changes() -> anyhow::Result<()> {
    let system = two_versions(true).await?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut half = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    half.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    let ids: Vec<String> = (0..12).map(|i| format!("pinned-{i}")).collect();
    let first: Vec<String> = ids
        .iter()
        .map(|id| half.choose(&format!("conversation/{id}")).to_string())
        .collect();
    assert!(first.contains(&"1".to_owned()) && first.contains(&"2".to_owned()));
    for id in &ids {
        system.baton_stdout(&[
            "send",
            "--conversation",
            id,
            "--to",
            "helper",
            "--wait",
            "hi",
        ])?;
    }
    // Now every new conversation goes to 2; these stay where they started.
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in &ids {
        system.baton_stdout(&["send", "--conversation", id, "--wait", "again"])?;
    }
    for (id, expected) in ids.iter().zip(&first) {
        let shown: serde_json::Value = serde_json::from_str(&system.baton_stdout(&[
            "conversations",
            "show",
            id,
            "--json",
        ])?)?;
        assert_eq!(shown["versions"]["helper"], expected.as_str(), "{shown}");
        let turns = shown["turns_listed"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(turns.len(), 2, "{shown}");
        for turn in &turns {
            let session = turn["session"].as_str().unwrap_or_default();
            assert_eq!(
                &answered_by(&system, session).await?,
                expected,
                "{id}: {turn}"
            );
        }
    }
    // A new conversation starts on the current version.
    system.baton_stdout(&[
        "send",
        "--conversation",
        "fresh",
        "--to",
        "helper",
        "--wait",
        "hi",
    ])?;
    let shown: serde_json::Value = serde_json::from_str(&system.baton_stdout(&[
        "conversations",
        "show",
        "fresh",
        "--json",
    ])?)?;
    assert_eq!(shown["versions"]["helper"], "2", "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn retire_refuses_while_a_version_holds_work_and_moves_conversations_when_asked()
-> anyhow::Result<()> {
    let system = two_versions(true).await?;
    // A conversation on version 1, the current one; then 2 becomes current.
    system.baton_stdout(&[
        "send",
        "--conversation",
        "kept",
        "--to",
        "helper",
        "--wait",
        "hi",
    ])?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    let unknown = refused(&system, &["retire", "helper", "7"])?;
    assert!(
        unknown.contains("version 7 of helper is unknown"),
        "{unknown}"
    );
    let current = refused(&system, &["retire", "helper", "2"])?;
    assert!(
        current.contains("version 2 is helper's current version"),
        "{current}"
    );
    let held = refused(&system, &["retire", "helper", "1"])?;
    assert!(
        held.contains("version 1 of helper still holds 1 conversation"),
        "{held}"
    );
    assert!(held.contains("--upgrade-conversations"), "{held}");
    // Its idle conversation moves on at its next turn: nothing holds 1.
    let retired = system.baton_stdout(&["retire", "helper", "1", "--upgrade-conversations"])?;
    assert!(
        retired.contains("version 1 of helper is retired"),
        "{retired}"
    );
    let shown: serde_json::Value =
        serde_json::from_str(&system.baton_stdout(&["versions", "helper", "--json"])?)?;
    let rows = shown["versions"].as_array().cloned().unwrap_or_default();
    let one = rows
        .iter()
        .find(|r| r["version"] == "1")
        .expect("version 1");
    assert_eq!(one["state"], "retired", "{shown}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    system.baton_stdout(&["send", "--conversation", "kept", "--wait", "again"])?;
    let record: serde_json::Value = serde_json::from_str(&system.baton_stdout(&[
        "conversations",
        "show",
        "kept",
        "--json",
    ])?)?;
    assert_eq!(record["versions"]["helper"], "2", "{record}");
    assert_eq!(
        record["moves"],
        serde_json::json!([{"turn": 2, "agent": "helper", "from": "1", "to": "2"}]),
        "{record}"
    );
    let turns = record["turns_listed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let second = turns[1]["session"].as_str().unwrap_or_default();
    assert_eq!(answered_by(&system, second).await?, "2");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handoff_to_a_versioned_type_goes_to_the_version_its_session_is_pinned_to()
-> anyhow::Result<()> {
    let mut system = two_versions(false).await?;
    // An unversioned front that hands every task to helper.
    system
        .relay("front", "front", &["--next", "helper"])
        .await?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut half = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    half.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    let front = baton_proto::AgentName::new("front")?;
    let mut sessions = Vec::new();
    for i in 0..60 {
        let task = Envelope::task(format!("handed {i}"));
        system.client.submit_to(&front, &task).await?;
        sessions.push(task.session);
    }
    let mut seen = BTreeMap::new();
    for session in sessions {
        let events = system
            .session_events(session, Duration::from_secs(60))
            .await?;
        let last = events.last().expect("events");
        assert_eq!(last.kind, EventType::Completed, "{session}: {last:?}");
        // The front names no version; helper's events name the pinned one.
        let helper: Vec<Option<String>> = events
            .iter()
            .filter(|e| e.agent.as_deref() == Some("helper"))
            .map(|e| e.version.as_ref().map(ToString::to_string))
            .collect();
        let expected = half.choose(&session.to_string()).to_string();
        assert!(!helper.is_empty(), "{session}");
        assert!(
            helper
                .iter()
                .all(|v| v.as_deref() == Some(expected.as_str())),
            "{session}: {helper:?}"
        );
        // The end carries the session's pins.
        assert_eq!(
            last.versions.get("helper").map(|v| v.as_str()),
            Some(expected.as_str()),
            "{last:?}"
        );
        *seen.entry(expected).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "both versions answered: {seen:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_that_says_so_lets_its_conversations_move_at_their_next_turn()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system.router(&[]).await?;
    let moving = ["--version", "1", "--upgrade-next-turn"];
    system.agent("v1", "helper", "help", 1, &moving).await?;
    system
        .agent("v2", "helper", "help", 1, &["--version", "2"])
        .await?;
    until_helper(&system, |c| c.versions.len() == 2).await?;
    let say = |text: &'static str| {
        let args = [
            "send",
            "--conversation",
            "mover",
            "--to",
            "helper",
            "--wait",
            text,
        ];
        system.baton_stdout(&args).map(drop)
    };
    say("hi")?;
    // While 1 is current, the conversation stays on it.
    say("still here")?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    say("and now")?;
    let record: serde_json::Value = serde_json::from_str(&system.baton_stdout(&[
        "conversations",
        "show",
        "mover",
        "--json",
    ])?)?;
    let turns = record["turns_listed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut by = Vec::new();
    for turn in &turns {
        by.push(answered_by(&system, turn["session"].as_str().unwrap_or_default()).await?);
    }
    assert_eq!(by, ["1", "1", "2"], "{record}");
    assert_eq!(
        record["moves"],
        serde_json::json!([{"turn": 3, "agent": "helper", "from": "1", "to": "2"}]),
        "{record}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_s_sessions_finish_on_its_version_once_each() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    let slow = [
        "--work-ms",
        "300",
        "--ack-wait-secs",
        "2",
        "--concurrency",
        "8",
    ];
    for label in ["v1a", "v1b"] {
        let mut flags = vec!["--version", "1"];
        flags.extend_from_slice(&slow);
        system.agent(label, "helper", "help", 1, &flags).await?;
    }
    let mut flags = vec!["--version", "2"];
    flags.extend_from_slice(&slow);
    system.agent("v2", "helper", "help", 1, &flags).await?;
    until_helper(&system, |c| {
        c.versions.get("1") == Some(&2) && c.versions.len() == 2
    })
    .await?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let helper = baton_proto::AgentName::new("helper")?;
    let mut sessions = Vec::new();
    for i in 0..40 {
        let task = Envelope::task(format!("slow {i}"));
        system.client.submit_to(&helper, &task).await?;
        sessions.push(task.session);
    }
    // One of version 1's two workers dies with tasks in hand.
    tokio::time::sleep(Duration::from_millis(150)).await;
    system.process("v1a").kill9();
    let mut half = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    half.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    for session in &sessions {
        let events = system
            .session_events(*session, Duration::from_secs(60))
            .await?;
        assert_eq!(
            events.last().map(|e| e.kind.clone()),
            Some(EventType::Completed),
            "{session}"
        );
    }
    // Settled: every session ended once, on the version its id chose.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut on_one, mut taken_over) = (0, 0);
    for session in &sessions {
        let history = system.client.history(*session).await?;
        let by = |label: &str| history.iter().any(|e| e.instance.as_deref() == Some(label));
        taken_over += usize::from(by("v1a") && by("v1b"));
        let ends: Vec<&Event> = history
            .iter()
            .filter(|e| e.kind == EventType::Completed)
            .collect();
        assert_eq!(ends.len(), 1, "{session}: {history:#?}");
        let expected = half.choose(&session.to_string());
        let named: Vec<&str> = history
            .iter()
            .filter_map(|e| e.version.as_deref())
            .collect();
        assert!(
            named.iter().all(|v| *v == expected.as_str()),
            "{session}: {named:?}"
        );
        on_one += usize::from(*expected == "1");
    }
    assert!(on_one > 0, "some sessions were version 1's");
    // The killed worker held some: the other worker of its version took them.
    assert!(taken_over > 0, "no session moved from the killed worker");
    Ok(())
}

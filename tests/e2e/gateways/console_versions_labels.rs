//! `baton console` names each agent of a session with the version that ran
//! it, as `--as` does (`helper@2`): the sessions list (served, and live),
//! the agent filter, a session's header, path, timeline and context, and the
//! agents page, which says which version each instance runs and what its
//! numbers count. Two versions of `helper` share new sessions half and half;
//! `front` (unversioned, named plainly) hands every task to it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, Event, Rollout};
use serde_json::json;

use crate::gateways::console::{console, get};
use crate::util::{System, wants};

/// How many sessions the test sends before the console reads them, and
/// while a browser watches.
const SENT: usize = 10;
const LIVE: usize = 6;

/// Runs a phase of `scripts/console_labels.py`; its JSON answer.
fn browser(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        std::path::Path::new("/usr/bin/chromium").exists()
            || std::env::var_os("CHROMIUM").is_some(),
        "the browser tests need Chromium: apt-get install chromium (or set CHROMIUM)"
    );
    crate::util::python_json("console_labels.py", "playwright", args)
}

/// The version of `helper` that ran the session of `events`, as they name
/// it (exactly one).
fn helper_version(events: &[Event]) -> anyhow::Result<String> {
    let named: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.agent.as_deref() == Some("helper"))
        .filter_map(|e| e.version.as_deref())
        .collect();
    anyhow::ensure!(named.len() == 1, "helper ran at {named:?}: {events:#?}");
    Ok(named.into_iter().next().unwrap_or_default().to_owned())
}

/// `SENT` tasks for `front` whose ids the 50 % rollout shares between both
/// versions (at least three on each), so that each version has sessions to
/// find; which version ran each is read from its events all the same.
fn tasks() -> Vec<Envelope> {
    let mut rollout = Rollout::first(
        &baton_proto::AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    rollout.ramp_to(&baton_proto::Version::from_static("2"), 50, 0);
    loop {
        let tasks: Vec<Envelope> = (0..SENT)
            .map(|n| Envelope::task(format!("task {n}")))
            .collect();
        let on_two = (tasks.iter())
            .filter(|t| rollout.choose(&t.session.to_string()) == "2")
            .count();
        if (3..=SENT - 3).contains(&on_two) {
            return tasks;
        }
    }
}

/// The rows of a sessions list page: session id → (agent cell, path cell).
fn rows(page: &str) -> BTreeMap<String, (String, String)> {
    let cell = |row: &str, class: &str| {
        let open = format!("<td class=\"{class}\">");
        row.split(&open)
            .nth(1)
            .and_then(|rest| rest.split("</td>").next())
            .unwrap_or_default()
            .to_owned()
    };
    page.split("<tr id=\"s-")
        .skip(1)
        .map(|row| {
            let id = row.split('"').next().unwrap_or_default().to_owned();
            (id, (cell(row, "agent"), cell(row, "path")))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_agent_of_a_session_is_named_with_its_version_and_the_filter_takes_type_at_version()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    system
        .agent("v1", "helper", "help", 1, &["--version", "1"])
        .await?;
    system
        .agent("v2", "helper", "help", 1, &["--version", "2"])
        .await?;
    system
        .agent("front", "front", "triage", 1, &["--next", "helper"])
        .await?;
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            let helper = answer.candidates.iter().find(|c| c.agent == "helper");
            helper.is_some_and(|c| c.versions.len() == 2)
                && answer.candidates.iter().any(|c| c.agent == "front")
        })
        .await?;
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "50"])?;
    // Every process follows the rollout as the server pushes it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // One console reads the sessions as they run; one starts after they
    // ended, and has only each session's last event to go by.
    let early = console(&mut system, "early", &[]).await?;

    let front = AgentName::new("front")?;
    let tasks = tasks();
    for task in &tasks {
        system.client.submit_to(&front, task).await?;
    }
    let ids = tasks.iter().map(|t| t.session).collect();
    let ended = system.ended_sessions(ids, Duration::from_secs(60)).await?;
    let mut truth = BTreeMap::new();
    for (session, events) in &ended {
        truth.insert(session.to_string(), helper_version(events)?);
    }
    let on = |version: &str| -> BTreeSet<String> {
        (truth.iter())
            .filter(|(_, v)| v.as_str() == version)
            .map(|(s, _)| s.clone())
            .collect()
    };
    assert!(!on("1").is_empty() && !on("2").is_empty(), "{truth:?}");
    assert_eq!(on("1").len() + on("2").len(), SENT, "{truth:?}");
    let late = console(&mut system, "late", &[]).await?;

    // Over HTTP, each console's list names each session's version, as its
    // events do, in the agent and path columns; `front` stays plain.
    for base in [&early, &late] {
        let (status, page) = get(base, "/").await?;
        assert_eq!(status, 200, "{page}");
        let listed = rows(&page);
        let versioned = (listed.values())
            .filter(|(agent, _)| agent == "helper@1" || agent == "helper@2")
            .count();
        assert_eq!(versioned, SENT, "{base}: {listed:#?}");
        for (session, version) in &truth {
            let (agent, path) = listed.get(session).cloned().unwrap_or_default();
            assert_eq!(agent, format!("helper@{version}"), "{base} {session}");
            assert_eq!(
                path,
                format!("front → helper@{version}"),
                "{base} {session}"
            );
        }
        for (filter, expected) in [
            ("helper%402", on("2")),
            ("helper%401", on("1")),
            ("helper", truth.keys().cloned().collect()),
            ("helper%403", BTreeSet::new()),
            ("front", BTreeSet::new()),
        ] {
            let (_, page) = get(base, &format!("/?agent={filter}")).await?;
            let found: BTreeSet<String> = rows(&page).into_keys().collect();
            assert_eq!(found, expected, "{base} /?agent={filter}");
        }
    }

    // In a browser: the filter typed into the form, the live feed under a
    // filter, a session's page and the agents page.
    let baton = baton_testkit::baton_binary();
    let nats = system.server.url().to_owned();
    let (v2_session, _) = truth
        .iter()
        .find(|(_, v)| v.as_str() == "2")
        .expect("a session on version 2");
    let live = LIVE.to_string();
    let seen = browser(&[
        "labels",
        &early,
        &baton.to_string_lossy(),
        &nats,
        v2_session,
        &live,
    ])?;
    assert_eq!(seen["errors"], json!([]), "{seen}");
    let set = |value: &serde_json::Value| -> BTreeSet<String> {
        serde_json::from_value(value.clone()).unwrap_or_default()
    };
    assert_eq!(seen["on_two"]["field"], "helper@2", "{seen}");
    assert_eq!(set(&seen["on_two"]["rows"]), on("2"), "{seen}");
    assert_eq!(seen["on_two"]["shown"], on("2").len(), "{seen}");
    assert_eq!(set(&seen["all_helper"]["rows"]).len(), SENT, "{seen}");
    assert_eq!(seen["all_helper"]["shown"], SENT, "{seen}");

    // The live feed: the rows the filtered page took are the new sessions
    // version 2 ran, labelled as the served rows are.
    let live = &seen["live"];
    assert_eq!(live["errors"], json!([]), "{live}");
    assert_eq!(
        live["stayed"], true,
        "the rows came without a reload: {live}"
    );
    assert_eq!(set(&live["before"]), on("2"), "{live}");
    let sent: Vec<String> = serde_json::from_value(live["sent"].clone())?;
    assert_eq!(sent.len(), LIVE, "{live}");
    let mut live_truth = BTreeMap::new();
    for session in &sent {
        let events = system
            .session_events(session.parse()?, Duration::from_secs(30))
            .await?;
        live_truth.insert(session.clone(), helper_version(&events)?);
    }
    let live_on_two: BTreeSet<String> = (live_truth.iter())
        .filter(|(_, v)| v.as_str() == "2")
        .map(|(s, _)| s.clone())
        .collect();
    let mut expected = on("2");
    expected.extend(live_on_two.iter().cloned());
    assert_eq!(set(&live["rows"]), expected, "{live}");
    let narrow: Vec<String> = serde_json::from_value(live["narrow_labels"].clone())?;
    assert!(narrow.iter().all(|l| l == "helper@2"), "{live}");
    for (session, version) in &live_truth {
        assert_eq!(
            live["labels"][session],
            format!("helper@{version}"),
            "{live}"
        );
        assert_eq!(
            live["paths"][session],
            format!("front → helper@{version}"),
            "{live}"
        );
    }

    // A session's page names helper's version wherever it names helper.
    let page = &seen["session"];
    assert_eq!(page["errors"], json!([]), "{page}");
    assert_eq!(page["header"], "helper@2", "{page}");
    assert_eq!(page["path"], "front → helper@2", "{page}");
    assert_eq!(page["nodes"], json!(["front", "helper@2"]), "{page}");
    let timeline = set(&page["timeline"]);
    assert_eq!(
        timeline,
        BTreeSet::from(["front".to_owned(), "helper@2".to_owned()]),
        "{page}"
    );
    let roles: Vec<String> = serde_json::from_value(page["roles"].clone())?;
    assert!(roles.contains(&"agent · front".to_owned()), "{page}");
    assert!(roles.contains(&"agent · helper@2".to_owned()), "{page}");
    assert!(!roles.iter().any(|r| r.contains("helper@1")), "{page}");
    assert_eq!(page["trace"], json!(["front", "helper@2"]), "{page}");

    // The agents page: each instance with the version it runs, and headings
    // that say what the numbers count.
    let agents = &seen["agents"];
    assert_eq!(agents["errors"], json!([]), "{agents}");
    assert_eq!(agents["versions"], "1 (1 worker), 2 (1 worker)", "{agents}");
    let headings: Vec<String> = serde_json::from_value(agents["headings"].clone())?;
    for heading in ["Workers (live)", "Versions (live workers each)"] {
        assert!(headings.iter().any(|h| h == heading), "{headings:?}");
    }
    let beats: Vec<(String, Option<String>, String)> =
        serde_json::from_value(agents["beats"]["helper"].clone())?;
    let instances: Vec<(&str, Option<&str>)> = (beats.iter())
        .map(|(instance, version, _)| (instance.as_str(), version.as_deref()))
        .collect();
    assert_eq!(
        instances,
        [("v1", Some("1")), ("v2", Some("2"))],
        "{agents}"
    );
    assert!(
        beats[0].2.starts_with("v1 runs helper@1, heard "),
        "{agents}"
    );
    assert!(
        beats[1].2.starts_with("v2 runs helper@2, heard "),
        "{agents}"
    );
    let front: Vec<(String, Option<String>, String)> =
        serde_json::from_value(agents["beats"]["front"].clone())?;
    assert_eq!(front.len(), 1, "{agents}");
    assert_eq!(front[0].1, None, "{agents}");
    assert!(
        front[0].2.starts_with("front runs front, heard "),
        "{agents}"
    );
    Ok(())
}

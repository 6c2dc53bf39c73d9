//! Teams, across real processes (`examples/teams`): a coordinator forms a
//! team from its notebook and the registry, assigns one task
//! synchronously and two asynchronously, hears progress, pauses without
//! holding a worker, and concludes; one member forms a sub-team.

use std::time::Duration;

use baton_proto::{Envelope, EventType, Message, Value};
use baton_testkit::eventually;
use serde_json::Value as Json;

use crate::util::{System, example};

const ROLES: [&str; 6] = [
    "lead",
    "researcher",
    "writer_a",
    "writer_b",
    "reviewer",
    "fact_checker",
];

async fn team() -> anyhow::Result<System> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    for role in ROLES {
        system
            .spec_worker(role, &example(&format!("teams/{role}.toml")), &[])
            .await?;
    }
    let draft = crate::util::wants(&["draft"]);
    system
        .lookup_until(&draft, Duration::from_secs(10), |a| a.candidates.len() == 2)
        .await?;
    Ok(system)
}

/// The messages of `kind`, as (speaker, text).
fn said<'a>(messages: &'a [Message], kind: &str) -> Vec<(&'a str, &'a str)> {
    messages
        .iter()
        .filter(|m| m.coordination.as_deref() == Some(kind))
        .map(|m| (m.name.as_deref().unwrap_or_default(), m.content.as_str()))
        .collect()
}

fn position(messages: &[Message], kind: &str, speaker: &str) -> usize {
    messages
        .iter()
        .position(|m| m.coordination.as_deref() == Some(kind) && m.name.as_deref() == Some(speaker))
        .unwrap_or(usize::MAX)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_forms_from_the_notebook_and_the_registry_and_coordinates() -> anyhow::Result<()> {
    let system = team().await?;
    // A first session with writer_a: the notebook remembers it.
    let mut warmup = Envelope::task("warm up");
    warmup
        .context
        .variables
        .insert("warmup".into(), Value::from(true));
    let events = system.run("lead", &warmup).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    eventually(Duration::from_secs(10), || async {
        let book: Json =
            serde_json::from_str(&system.baton_stdout(&["notebook", "lead", "--json"])?)?;
        let known = book["collaborators"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["agent"] == "writer_a");
        anyhow::ensure!(known, "{book}");
        Ok(())
    })
    .await?;

    let task = Envelope::task("How long does pasta take to cook at altitude?");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("lead")?, &task)
        .await?;
    let events = system
        .session_events(task.session, Duration::from_secs(60))
        .await?;
    let end = events.last().unwrap();
    assert_eq!(
        end.kind,
        EventType::Completed,
        "{:?}",
        events
            .iter()
            .map(|e| (e.kind.to_string(), e.detail.clone()))
            .collect::<Vec<_>>()
    );
    let messages = &end.context.as_ref().unwrap().messages;

    // Team-up: writer_a from the notebook (the registry alone prefers
    // writer_b, a lower tier), reviewer from the registry, researcher named.
    let intro = said(messages, "team_up");
    assert_eq!(intro.len(), 1, "{intro:?}");
    assert_eq!(intro[0].0, "lead");
    assert!(
        intro[0].1.contains("researcher (named)")
            && intro[0].1.contains("writer_a (notebook)")
            && intro[0].1.contains("reviewer (registry)"),
        "{intro:?}"
    );
    let registry_alone = system.lookup_once(&crate::util::wants(&["draft"])).await?;
    assert_eq!(registry_alone.candidates[0].agent, "writer_b");

    // One synchronous and two asynchronous assignments, by lead.
    assert_eq!(
        said(messages, "assign_sync"),
        [("lead", "writer_a: draft the answer")]
    );
    assert_eq!(
        said(messages, "assign_async"),
        [
            ("lead", "reviewer: review the plan"),
            ("lead", "researcher: research the facts")
        ]
    );
    assert_eq!(
        said(messages, "discussion")[0],
        ("lead", "Let's split the work.")
    );
    // The asynchronous assignees confirmed receipt, once each.
    let mut progress: Vec<&str> = said(messages, "progress")
        .iter()
        .map(|(who, _)| *who)
        .collect();
    progress.sort_unstable();
    assert_eq!(progress, ["researcher", "reviewer"], "{messages:?}");
    // Every result joined the group conversation once.
    let mut results: Vec<&str> = said(messages, "result")
        .iter()
        .map(|(who, _)| *who)
        .collect();
    results.sort_unstable();
    assert_eq!(
        results,
        ["researcher", "reviewer", "writer_a"],
        "{messages:?}"
    );
    // The draft came in, lead paused, and the other two reported after.
    let paused = position(messages, "pause", "lead");
    assert!(
        position(messages, "result", "writer_a") < paused,
        "{messages:?}"
    );
    assert!(
        paused < position(messages, "result", "reviewer"),
        "{messages:?}"
    );
    assert!(
        paused < position(messages, "result", "researcher"),
        "{messages:?}"
    );
    assert_eq!(said(messages, "pause").len(), 1);
    let last = messages.last().unwrap();
    assert_eq!(
        (last.coordination.as_deref(), last.name.as_deref()),
        (Some("conclude"), Some("lead"))
    );
    let output = serde_json::to_value(end.output.clone().unwrap())?;
    assert_eq!(output["writer_a"], "draft by writer_a", "{output}");
    assert_eq!(output["reviewer"], "review: looks right", "{output}");
    assert_eq!(
        output["researcher"], "researched; facts checked",
        "{output}"
    );

    // The researcher's sub-team: it delegated to fact_checker, one level down.
    let nested = events
        .iter()
        .find(|e| e.kind == EventType::Delegated && e.agent.as_deref() == Some("researcher"))
        .expect("the researcher's sub-team");
    assert_eq!(nested.to.as_deref(), Some("fact_checker"));
    // Progress notes were recorded in the join, not taken as results.
    let mut noted: Vec<String> = events
        .iter()
        .filter(|e| e.kind == EventType::Result)
        .filter_map(|e| e.detail.clone())
        .filter(|d| d.starts_with("progress "))
        .collect();
    noted.sort();
    assert_eq!(
        noted,
        [
            "progress result from researcher: progress added to the conversation",
            "progress result from reviewer: progress added to the conversation"
        ]
    );
    // Exactly one end.
    assert_eq!(events.iter().filter(|e| e.kind.is_terminal()).count(), 1);

    // The notebook now has the whole team.
    let book: Json = eventually(Duration::from_secs(10), || async {
        let book: Json =
            serde_json::from_str(&system.baton_stdout(&["notebook", "lead", "--json"])?)?;
        let writer = book["collaborators"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["agent"] == "writer_a")
            .cloned();
        anyhow::ensure!(writer.is_some_and(|w| w["sessions"] == 2), "{book}");
        Ok(book)
    })
    .await?;
    for member in ["reviewer", "researcher"] {
        assert!(
            book["collaborators"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["agent"] == member),
            "{book}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_team_section_is_refused_with_its_fix() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("lead.toml");
    std::fs::write(
        &spec,
        "name = \"lead\"\nkind = \"exec\"\n[exec]\ncommand = [\"true\"]\n[team]\nmembers = [\"Bad Name\"]\nfind = [[]]\nmax_depth = 0\n",
    )?;
    let output = std::process::Command::new(baton_testkit::baton_binary())
        .args(["check", &spec.to_string_lossy()])
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("[team] members entry"), "{text}");
    assert!(
        text.contains("[team] find: each entry is a non-empty list"),
        "{text}"
    );
    assert!(
        text.contains("[team] max_depth must be at least 1"),
        "{text}"
    );
    Ok(())
}

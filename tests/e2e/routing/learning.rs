//! Routing learned from outcomes, across real processes: the registry
//! records how sessions end, credits the agents on their path, ranks by
//! what it learned, explains its choices, keeps each agent type's
//! notebook, and takes feedback; bad requests are refused with nothing
//! stored.

use std::time::Duration;

use baton_proto::{Envelope, EventType, LookupRequest};
use baton_testkit::eventually;
use serde_json::Value as Json;
use uuid::Uuid;

use crate::util::{HEARTBEAT_MS, System};

/// The solvers' agents (`tests/e2e/scripts/solvers.py`): front, two
/// solvers, the checker (which sends `solver_bad`'s answers to a person)
/// and the person, but the solvers not in `without`. Workers use the
/// registry; none is started here.
async fn solvers(system: &mut System, without: &[&str]) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/scripts/solvers.py");
    let exec = |role: &str| {
        format!(
            "kind = \"exec\"\n[exec]\ncommand = [\"python3\", {:?}, \"{role}\"]\n",
            script
        )
    };
    let specs = [
        (
            "front",
            format!(
                "name = \"front\"\ncapabilities = [\"front\"]\n{}",
                exec("front")
            ),
        ),
        (
            "solver_bad",
            format!(
                "name = \"solver_bad\"\ncapabilities = [\"solve\"]\n{}",
                exec("solver_bad")
            ),
        ),
        (
            "solver_good",
            format!(
                "name = \"solver_good\"\ncapabilities = [\"solve\"]\n{}",
                exec("solver_good")
            ),
        ),
        (
            "checker",
            format!(
                "name = \"checker\"\ncapabilities = [\"check\"]\nfallback = \"person\"\n{}",
                exec("checker")
            ),
        ),
        (
            "person",
            "name = \"person\"\ncapabilities = [\"people\"]\nkind = \"human\"\n".to_owned(),
        ),
    ];
    for (name, spec) in specs {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, spec)?;
        if without.contains(&name) {
            continue;
        }
        system.spec_worker(name, &path, &[]).await?;
    }
    let solve = wants("solve");
    system
        .lookup_until(&solve, Duration::from_secs(10), |a| {
            a.candidates.len() == 2 - without.len()
        })
        .await?;
    Ok(dir)
}

fn wants(capability: &str) -> LookupRequest {
    LookupRequest {
        requires: vec![capability.to_owned()],
        ..LookupRequest::default()
    }
}

/// Sends `text` to front; the session, and its end: completed, or waiting
/// for a person.
async fn run_to_end(
    system: &System,
    text: &str,
) -> anyhow::Result<(uuid::Uuid, baton_proto::Event)> {
    let task = Envelope::task(text);
    system
        .client
        .submit_to(&baton_proto::AgentName::new("front")?, &task)
        .await?;
    let end = eventually(Duration::from_secs(30), || async {
        system
            .stored_events(task.session)
            .await?
            .into_iter()
            .find(|e| matches!(e.kind, EventType::Completed | EventType::Waiting))
            .ok_or_else(|| anyhow::anyhow!("{text}: not ended yet"))
    })
    .await?;
    Ok((task.session, end))
}

/// Sends `text` to front; the solver the session went to, and whether it
/// went to a person (else it completed).
async fn solve(system: &System, text: &str) -> anyhow::Result<(String, bool)> {
    let (_, end) = run_to_end(system, text).await?;
    let solver = end
        .path
        .iter()
        .map(|hop| hop.agent.to_string())
        .find(|agent| agent.starts_with("solver"))
        .unwrap_or_default();
    Ok((solver, end.kind == EventType::Waiting))
}

/// Outcome records stored so far.
async fn outcomes(system: &System) -> anyhow::Result<u64> {
    let js = async_nats::jetstream::new(system.nats.clone());
    Ok(js
        .get_stream("BATON_OUTCOMES")
        .await?
        .info()
        .await?
        .state
        .messages)
}

async fn outcomes_reach(system: &System, count: u64) -> anyhow::Result<()> {
    eventually(Duration::from_secs(20), || async {
        let now = outcomes(system).await?;
        anyhow::ensure!(now >= count, "{now} outcomes of {count}");
        Ok(())
    })
    .await?;
    Ok(())
}

/// `baton agents --why ... --json`, parsed.
fn why(system: &System, extra: &[&str]) -> anyhow::Result<Vec<Json>> {
    let mut args = vec!["agents", "--why", "--requires", "solve", "--json"];
    args.extend_from_slice(extra);
    Ok(serde_json::from_str(&system.baton_stdout(&args)?)?)
}

/// `why` once the registry ranks both solvers.
async fn both_ranked(system: &System) -> anyhow::Result<Vec<Json>> {
    let ranked = eventually(Duration::from_secs(10), || async {
        let ranked = why(system, &[])?;
        anyhow::ensure!(ranked.len() == 2, "{ranked:?}");
        Ok(ranked)
    })
    .await?;
    Ok(ranked)
}

fn candidate<'a>(ranked: &'a [Json], agent: &str) -> &'a Json {
    ranked
        .iter()
        .find(|c| c["agent"] == agent)
        .unwrap_or(&Json::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_registry_learns_which_agent_resolves_and_says_why() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let interval = HEARTBEAT_MS.to_string();
    // Today's ranking first, with only solver_bad live.
    system
        .spawn(
            "r0",
            &["registry", "--heartbeat-ms", &interval, "--no-learning"],
            "registry serving lookups",
        )
        .await?;
    let dir = solvers(&mut system, &["solver_good"]).await?;
    for n in 0..5 {
        let (solver, escalated) = solve(&system, &format!("find x when {n}x = 10")).await?;
        assert_eq!(
            (solver.as_str(), escalated),
            ("solver_bad", true),
            "session {n}"
        );
    }
    outcomes_reach(&system, 5).await?;
    system
        .spec_worker("solver_good", &dir.path().join("solver_good.toml"), &[])
        .await?;
    let ranked = both_ranked(&system).await?;
    // Without learning, nothing learned is shown.
    assert!(
        ranked.iter().all(|c| c["why"].get("learned").is_none()),
        "{ranked:?}"
    );

    // A learning replica reads the stored outcomes before it answers.
    system.process("r0").kill9();
    system
        .spawn(
            "r1",
            &["registry", "--heartbeat-ms", &interval],
            "registry serving lookups",
        )
        .await?;
    let ranked = both_ranked(&system).await?;
    let bad = &candidate(&ranked, "solver_bad")["why"];
    assert_eq!(bad["learned"]["observations"], 5, "{ranked:?}");
    assert_eq!(bad["learned"]["key"], "solve");
    // Beta(1, 1 + 5): one success and one failure assumed, then five escalations.
    assert!(
        (bad["learned"]["mean"].as_f64().unwrap() - 1.0 / 7.0).abs() < 1e-9,
        "{bad}"
    );
    let good = &candidate(&ranked, "solver_good")["why"];
    assert_eq!(good["learned"]["observations"], 0, "{ranked:?}");
    assert!(good["learned"]["sd"].as_f64().unwrap() > bad["learned"]["sd"].as_f64().unwrap());
    for factor in ["fit", "tier", "free", "success", "base"] {
        assert!(good[factor].as_f64().is_some(), "{factor}: {good}");
    }

    let mut to_good = 0;
    for n in 0..8 {
        let (solver, escalated) = solve(&system, &format!("find x when {n}x = 20")).await?;
        assert_eq!(escalated, solver == "solver_bad");
        to_good += usize::from(solver == "solver_good");
    }
    assert!(to_good >= 5, "{to_good} of 8 sessions went to solver_good");
    outcomes_reach(&system, 13).await?;
    let mut first = 0;
    for _ in 0..20 {
        let answer = system.lookup_once(&wants("solve")).await?;
        first += usize::from(answer.candidates[0].agent == "solver_good");
    }
    assert!(
        first >= 18,
        "solver_good ranked first in {first} of 20 lookups"
    );

    // Similar past sessions vote, and are named.
    let ranked = why(&system, &["--query", "find x when 3x = 20"])?;
    let similar = candidate(&ranked, "solver_good")["why"]["similar"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!similar.is_empty(), "{ranked:?}");
    assert!(
        similar
            .iter()
            .all(|s| s["similarity"].as_f64().unwrap() >= 0.3),
        "{similar:?}"
    );
    let text = system.baton_stdout(&[
        "agents",
        "--why",
        "--requires",
        "solve",
        "--query",
        "find x when 3x = 20",
    ])?;
    assert!(
        text.contains("LEARNED") && text.contains("solver_good") && text.contains('±'),
        "{text}"
    );
    assert!(text.contains("similar past sessions added"), "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn notebooks_and_feedback_credit_the_agents_of_a_session() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    let _dir = solvers(&mut system, &[]).await?;
    // Solvers: the first lookup has no evidence, so the tie goes to solver_bad.
    let (solver, escalated) = solve(&system, "what is 2 + 2").await?;
    assert_eq!((solver.as_str(), escalated), ("solver_bad", true));
    // A solver that fails; the dead letter is replayed (re-opened), and fails again.
    let crash = Envelope::task("please crash");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("front")?, &crash)
        .await?;
    system
        .event_of_kind(crash.session, EventType::Failed)
        .await?;
    outcomes_reach(&system, 2).await?;
    let dead = system.client.dead_letters().await?;
    system.baton_stdout(&["dlq", "replay", &dead[0].seq.to_string()])?;
    outcomes_reach(&system, 4).await?;

    let book: Json = serde_json::from_str(&system.baton_stdout(&["notebook", "front", "--json"])?)?;
    assert_eq!(book["sessions"], 2, "{book}");
    let entry = book["collaborators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["agent"]
                .as_str()
                .unwrap_or_default()
                .starts_with("solver")
                && c["failed"] == 1
        })
        .cloned();
    let entry = entry.unwrap_or_default();
    assert_eq!(
        (entry["failed"].as_u64(), entry["reopened"].as_u64()),
        (Some(1), Some(1)),
        "{book}"
    );
    // The escalation is credited to the agents before the person.
    let checker = book["collaborators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["agent"] == "checker")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (checker["sessions"].as_u64(), checker["escalated"].as_u64()),
        (Some(1), Some(1)),
        "{book}"
    );

    // Feedback on a completed session, credited to its agents.
    let mut completed = None;
    for n in 0..10 {
        let (session, end) = run_to_end(&system, &format!("what is {n} + 1")).await?;
        if end.kind == EventType::Completed {
            completed = Some(session);
            break;
        }
    }
    let session = completed
        .ok_or_else(|| anyhow::anyhow!("no session completed in 10"))?
        .to_string();
    let before = outcomes(&system).await?;
    let said = system.baton_stdout(&[
        "feedback",
        &session,
        "--score",
        "0.25",
        "--note",
        "the answer was late",
    ])?;
    assert!(
        said.contains("credited to checker, front, solver_good"),
        "{said}"
    );
    assert_eq!(outcomes(&system).await?, before + 1, "one feedback record");
    let good = eventually(Duration::from_secs(10), || async {
        let book: Json =
            serde_json::from_str(&system.baton_stdout(&["notebook", "solver_good", "--json"])?)?;
        let front = book["collaborators"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["agent"] == "front")
            .cloned();
        front
            .filter(|f| f["feedback"] == 1)
            .ok_or_else(|| anyhow::anyhow!("{book}"))
    })
    .await?;
    assert_eq!(good["feedback_score"], 0.25, "{good}");
    let text = system.baton_stdout(&["notebook", "front"])?;
    assert!(
        text.contains("COLLABORATOR") && text.contains("solver_good") && text.contains("0.25 (1)"),
        "{text}"
    );
    // `--prefer front`: its notebook is in the explanation.
    let ranked = why(&system, &["--prefer", "front"])?;
    assert_eq!(
        candidate(&ranked, "solver_good")["why"]["notebook"]["agent"],
        "solver_good",
        "{ranked:?}"
    );

    // Bad input: a clear error, and nothing stored.
    let before = outcomes(&system).await?;
    let refused = |args: &[&str], says: &str| -> anyhow::Result<()> {
        let output = system.baton(args).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        Ok(())
    };
    let unknown = Uuid::new_v4().to_string();
    refused(
        &["feedback", &unknown, "--score", "0.5"],
        &format!("no session {unknown}: nothing about it is stored"),
    )?;
    refused(
        &["feedback", &session, "--score", "1.5"],
        "--score 1.5 is out of range",
    )?;
    refused(&["feedback", &session, "--score", "-0.1"], "out of range")?;
    refused(
        &["feedback", "not-a-session", "--score", "0.5"],
        "is not a session id",
    )?;
    refused(&["notebook", "nobody"], "no agent type nobody")?;
    refused(&["notebook", "Not A Name"], "is not an agent type name")?;
    // The registry checks the score too, for clients that do not.
    let raw = serde_json::json!({"session": session, "score": 7});
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    let reply = system
        .nats
        .request_with_headers("baton.registry.feedback", headers, raw.to_string().into())
        .await?;
    let error = reply
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Service-Error"))
        .map(|v| v.to_string());
    assert!(
        error
            .as_deref()
            .unwrap_or_default()
            .contains("the score must be from 0"),
        "{error:?}"
    );
    assert_eq!(outcomes(&system).await?, before, "bad input stored nothing");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_takes_feedback_on_a_finished_session() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.registry("r1").await?;
    let _dir = solvers(&mut system, &["solver_bad"]).await?;
    let (session, end) = run_to_end(&system, "what is 1 + 1").await?;
    assert_eq!(end.kind, EventType::Completed);
    let session = session.to_string();
    let url = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let seen =
        crate::gateways::console::browser(&["feedback", &url, &session, "0.6", "<b>late</b>"])?;
    // The page's live refresh, let through while the form was being filled
    // in, left the form the node it was, with what was typed.
    assert_eq!(
        seen["kept"],
        serde_json::json!({"held": 1, "mark": "typed-into", "score": "0.6"}),
        "{seen}"
    );
    assert_eq!(seen["title"], "Feedback recorded", "{seen}");
    assert_eq!(
        seen["notice"],
        format!(
            "Feedback 0.6 recorded for session {session}, credited to checker, front, solver_good."
        ),
        "{seen}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    let good = eventually(Duration::from_secs(10), || async {
        let book: Json =
            serde_json::from_str(&system.baton_stdout(&["notebook", "front", "--json"])?)?;
        let good = book["collaborators"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["agent"] == "solver_good" && c["feedback"] == 1)
            .cloned();
        good.ok_or_else(|| anyhow::anyhow!("{book}"))
    })
    .await?;
    assert_eq!(good["feedback_score"], 0.6, "{good}");
    // A score the form would not send is refused by the console too, with nothing stored.
    assert_eq!(seen["bad_status"], 400, "{seen}");
    let body = seen["bad_text"].as_str().unwrap_or_default();
    assert!(body.contains("the score must be from 0"), "{body}");
    let before = outcomes(&system).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(outcomes(&system).await?, before);
    Ok(())
}

//! Gated rollouts: `baton rollout --steps ... --gate ...` moves a version
//! step by step, and the routers promote or roll it back by how the
//! sessions started on each version ended. The agent type `helper` is an
//! LLM agent in two versions, each with its own stand-in model: version 2's
//! answers are scripted per test (as good, or failing 40 % of its sessions
//! with a refused model call).

use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};
use baton_testkit::{FakeLlm, Scripted};
use serde_json::Value as Json;

use crate::util::System;

/// The spec of `helper` at `version`, on `llm`.
fn helper(version: &str, llm: &FakeLlm) -> String {
    format!(
        "name = \"helper\"\nkind = \"llm\"\nversion = \"{version}\"\ntimeout_ms = 20000\n\n[llm]\nbase_url = \"{}\"\nmodel = \"m\"\nsystem_prompt = \"Help.\"\n",
        llm.url()
    )
}

/// A model that answers every task, or refuses (400) the tasks whose
/// number ends in 0 to 3 when `failing`: 40 % of them.
fn model(failing: bool) -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::responding(move |body: &Json| {
        let asked = body["messages"].to_string();
        let n = asked
            .split("task ")
            .nth(1)
            .and_then(|rest| {
                rest.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        if failing && n % 10 < 4 {
            Scripted::error(400, &[])
        } else {
            Scripted::text("done")
        }
    })?)
}

/// Two versions of `helper` (1 current, 2 on `v2`), and `routers` routers.
async fn deployment(
    v2: &FakeLlm,
    routers: usize,
) -> anyhow::Result<(System, FakeLlm, tempfile::TempDir)> {
    deployment_with(v2, routers, "").await
}

/// As [`deployment`], with `more` at the end of version 2's spec.
async fn deployment_with(
    v2: &FakeLlm,
    routers: usize,
    more: &str,
) -> anyhow::Result<(System, FakeLlm, tempfile::TempDir)> {
    let v1 = model(false)?;
    let specs = [("helper-v1", helper("1", &v1))];
    let (mut system, dir) = crate::util::spec_workers_with(&specs, &[]).await?;
    let path = dir.path().join("helper-v2.toml");
    std::fs::write(&path, format!("{}{more}", helper("2", v2)))?;
    let spec = path.to_string_lossy().into_owned();
    let args = ["worker", "--spec", spec.as_str(), "--no-registry"];
    system.spawn("helper-v2", &args, "worker started").await?;
    for n in 0..routers {
        let label = format!("router-{n}");
        system
            .spawn(&label, &["router"], "gatekeeper started")
            .await?;
    }
    Ok((system, v1, dir))
}

/// The rollout of `helper`, as `baton versions --json` shows it.
fn versions(system: &System) -> anyhow::Result<Json> {
    Ok(serde_json::from_str(
        &system.baton_stdout(&["versions", "helper", "--json"])?,
    )?)
}

/// Version `version`'s row in what `baton versions --json` shows.
fn row(shown: &Json, version: &str) -> Json {
    let rows = shown["versions"].as_array().into_iter().flatten();
    rows.into_iter()
        .find(|row| row["version"] == version)
        .cloned()
        .unwrap_or_default()
}

/// The decisions `baton versions` shows, as (what, step).
fn decided(shown: &Json) -> Vec<(String, u64)> {
    (shown["decisions"].as_array().into_iter().flatten())
        .map(|d| {
            (
                d["what"].as_str().unwrap_or_default().to_owned(),
                d["step"].as_u64().unwrap_or(99),
            )
        })
        .collect()
}

/// Sends batches of 40 tasks straight to `helper`, each batch once the one
/// before ended, until `done` says so of the decisions (at most `batches`);
/// calls `between` after each batch with the decisions so far.
async fn traffic(
    system: &mut System,
    batches: usize,
    done: impl Fn(&[(String, u64)]) -> bool,
    mut between: impl FnMut(&mut System, &[(String, u64)]),
) -> anyhow::Result<Json> {
    let helper = AgentName::new("helper")?;
    let mut sent = 0u64;
    for _ in 0..batches {
        let mut sessions = Vec::new();
        for _ in 0..40 {
            let task = Envelope::task(format!("task {sent}"));
            sent += 1;
            system.client.submit_to(&helper, &task).await?;
            sessions.push(task.session);
        }
        system
            .ended_sessions(sessions, Duration::from_secs(60))
            .await?;
        let shown = versions(system)?;
        let decisions = decided(&shown);
        if done(&decisions) {
            // Read again: a decision is recorded once its change is stored.
            return versions(system);
        }
        between(system, &decisions);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut routers = Vec::new();
    for label in ["router-0", "router-1"] {
        if system.has_process(label) {
            routers.push(system.process(label).stderr());
        }
    }
    anyhow::bail!(
        "the rollout did not end within {batches} batches: {}\n--- routers ---\n{}",
        versions(system)?,
        routers.join("\n---\n")
    )
}

/// Starts the gated rollout of version 2 of `helper`.
fn start(system: &System, interval: &str) -> anyhow::Result<String> {
    system.baton_stdout(&[
        "rollout",
        "helper",
        "--to",
        "2",
        "--force",
        "--steps",
        "5,25,50,100",
        "--interval",
        interval,
        "--min-sessions",
        "6",
        "--gate",
        "success >= -2pt",
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_that_fails_often_is_rolled_back_before_half_of_the_sessions()
-> anyhow::Result<()> {
    let v2 = model(true)?;
    let (mut system, _v1, _dir) = deployment(&v2, 1).await?;
    // A step lasts 2 minutes: the rollback can only come from evidence.
    let started = start(&system, "120s")?;
    assert!(
        started.contains("5% of new sessions go to version 2"),
        "{started}"
    );
    // Conversations opened at 5 %: three whose ids the rollout sends to 2.
    let conversations = opened(&system, 3)?;
    let shown = traffic(
        &mut system,
        80,
        |d| d.iter().any(|(what, _)| what == "rollback"),
        |_, _| {},
    )
    .await?;
    let decisions = decided(&shown);
    // Started, then rolled back at 5 % or 25 %: never reached 50 %.
    assert_eq!(
        decisions.first(),
        Some(&("start".to_owned(), 0)),
        "{decisions:?}"
    );
    let (_, at) = decisions
        .iter()
        .find(|(what, _)| what == "rollback")
        .cloned()
        .unwrap_or_default();
    assert!(at < 2, "rolled back at step {at}: {decisions:?}");
    assert!(
        !decisions.iter().any(|(what, _)| what == "promoted"),
        "{decisions:?}"
    );
    // Recorded with its numbers and why.
    let rollback = (shown["decisions"].as_array().into_iter().flatten())
        .find(|d| d["what"] == "rollback")
        .cloned()
        .unwrap_or_default();
    let failed = rollback["new"]["sessions"].as_u64().unwrap_or(0)
        - rollback["new"]["succeeded"].as_u64().unwrap_or(0);
    let why = rollback["why"].as_str().unwrap_or_default();
    assert!(
        failed > 0 && why.contains("broken with enough evidence: success >= -2pt"),
        "{rollback}"
    );
    // The whole interval of the difference was below the gate.
    let high = rollback["readings"][0]["within"][1].as_f64().unwrap_or(0.0);
    assert!(high < -2.0, "{rollback}");
    assert_eq!(
        rollback["readings"][0]["gate"], "success >= -2pt",
        "{rollback}"
    );
    // New sessions all go to version 1 again.
    let two = row(&shown, "2");
    assert_eq!(two["weight"], 0, "{shown}");
    let text = system.baton_stdout(&["versions", "helper"])?;
    assert!(text.contains("rollback version 2 at step"), "{text}");
    // No open conversation changed version: each next turn is on 2 still.
    for id in &conversations {
        system.baton_stdout(&["send", "--conversation", id, "--wait", "task 5"])?;
        let shown: Json = serde_json::from_str(&system.baton_stdout(&[
            "conversations",
            "show",
            id,
            "--json",
        ])?)?;
        let turns = shown["turns_listed"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(turns.len(), 2, "{shown}");
        for turn in &turns {
            let session = turn["session"].as_str().unwrap_or_default();
            let version = super::versions::answered_by(&system, session).await?;
            assert_eq!(version, "2", "{id}: {turn}");
        }
    }
    Ok(())
}

/// Opens `n` conversations on `helper` whose ids the 5 % step sends to
/// version 2 (each id's choice is the rollout's, sticky), each with one
/// turn that version 2 answers; their ids.
fn opened(system: &System, n: usize) -> anyhow::Result<Vec<String>> {
    let mut at_five = baton_proto::Rollout::first(
        &AgentName::from_static("helper"),
        &baton_proto::Version::from_static("1"),
        0,
    );
    at_five.ramp_to(&baton_proto::Version::from_static("2"), 5, 0);
    let ids: Vec<String> = (0..)
        .map(|i| format!("kept-{i}"))
        .filter(|id| at_five.choose(&format!("conversation/{id}")) == "2")
        .take(n)
        .collect();
    for id in &ids {
        let args = [
            "send",
            "--conversation",
            id,
            "--to",
            "helper",
            "--wait",
            "task 5",
        ];
        system.baton_stdout(&args)?;
    }
    Ok(ids)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_equal_version_reaches_every_step_though_a_router_is_killed() -> anyhow::Result<()> {
    let v2 = model(false)?;
    let (mut system, _v1, _dir) = deployment(&v2, 2).await?;
    start(&system, "2s")?;
    let mut killed = false;
    let shown = traffic(
        &mut system,
        60,
        |d| d.iter().any(|(what, _)| what == "promoted"),
        |system, decisions| {
            // Mid-rollout, once the first step was promoted: a router dies.
            if !killed && decisions.iter().any(|(what, _)| what == "promote") {
                system.process("router-0").kill9();
                killed = true;
            }
        },
    )
    .await?;
    assert!(killed);
    let decisions = decided(&shown);
    // Every step decided once, in order: none skipped or repeated.
    let expected = [
        ("start", 0),
        ("promote", 0),
        ("promote", 1),
        ("promoted", 2),
    ];
    let expected: Vec<(String, u64)> = expected
        .iter()
        .map(|(w, s)| ((*w).to_owned(), *s))
        .collect();
    assert_eq!(decisions, expected);
    // The rollout changed once per step (records of one step decided twice
    // could share an id; its changes could not).
    let changes: Vec<(String, Json)> = (shown["history"].as_array().into_iter().flatten())
        .filter(|change| change["version"] == "2")
        .map(|change| {
            (
                change["what"].as_str().unwrap_or_default().to_owned(),
                change["ramp"]["weight"].clone(),
            )
        })
        .collect();
    let ramps = [
        ("ramp", Json::from(5)),
        ("ramp", Json::from(25)),
        ("ramp", Json::from(50)),
        ("promote", Json::Null),
    ];
    let ramps: Vec<(String, Json)> = ramps.into_iter().map(|(w, r)| (w.to_owned(), r)).collect();
    assert_eq!(changes, ramps, "{shown}");
    let two = row(&shown, "2");
    assert_eq!(
        (two["state"].as_str(), &two["weight"]),
        (Some("current"), &Json::from(100)),
        "{shown}"
    );
    // Each promotion shows the numbers it was decided on.
    for decision in shown["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["what"] != "start")
    {
        assert!(
            decision["new"]["sessions"].as_u64() >= Some(6),
            "{decision}"
        );
        assert_eq!(decision["readings"][0]["verdict"], "holds", "{decision}");
    }
    // The console lists the same decisions, in a real browser.
    let url = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let seen = crate::gateways::console_versions::browser(&["gated", &url, "helper"])?;
    let listed: Vec<(String, u64)> = (seen["decisions"].as_array().into_iter().flatten())
        .map(|d| {
            (
                d[0].as_str().unwrap_or_default().to_owned(),
                d[1].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(listed, expected, "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    let promoted = seen["decisions"][3][2].as_str().unwrap_or_default();
    assert!(
        promoted.contains("every gate holds") && promoted.contains("succeeded"),
        "{seen}"
    );
    let session = Envelope::task("task 1");
    system
        .client
        .submit_to(&AgentName::new("helper")?, &session)
        .await?;
    let end = system
        .client
        .wait(session.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        (end.kind, end.version.as_ref().map(ToString::to_string)),
        (EventType::Completed, Some("2".to_owned()))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_rollout_refuses_bad_input_naming_the_fix() -> anyhow::Result<()> {
    let v2 = model(false)?;
    let (system, _v1, _dir) = deployment(&v2, 0).await?;
    let refused = |args: &[&str]| -> anyhow::Result<String> {
        let mut all = vec!["rollout", "helper", "--to", "2", "--force"];
        all.extend_from_slice(args);
        let output = system.baton(&all).output()?;
        anyhow::ensure!(!output.status.success(), "{all:?} succeeded");
        Ok(String::from_utf8(output.stderr)?)
    };
    let cases: [(&[&str], &str); 6] = [
        (&["--steps", "5,25,50"], "must end at 100"),
        (&["--steps", "50,25,100"], "must rise"),
        (
            &["--steps", "5,100", "--gate", "tokens <= 2x"],
            "not recorded: use success, cost, p50 or p95",
        ),
        (
            &["--steps", "5,100", "--gate", "success >= 2x"],
            "bounded in pt",
        ),
        (
            &["--steps", "5,100", "--gate", "success>=-2pt"],
            "METRIC OP BOUND",
        ),
        (
            &["--steps", "5,100", "--interval", "soon"],
            "e.g. 15s, 10m or 1h",
        ),
    ];
    for (args, said) in cases {
        let err = refused(args)?;
        assert!(err.contains(said), "{args:?}: {err}");
    }
    let output = system.baton(&["rollout", "helper", "--pause"]).output()?;
    let err = String::from_utf8(output.stderr)?;
    assert!(
        !output.status.success() && err.contains("no gated rollout under way"),
        "{err}"
    );
    // Nothing changed: version 1 takes every new session.
    let shown = versions(&system)?;
    assert!(decided(&shown).is_empty(), "{shown}");
    let one = row(&shown, "1");
    assert_eq!(one["weight"], 100, "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_whose_spec_says_how_it_rolls_out_starts_its_gated_rollout_itself()
-> anyhow::Result<()> {
    let v2 = model(false)?;
    let rollout = "\n[rollout]\nsteps = [50, 100]\ninterval = \"1s\"\nmin_sessions = 4\n";
    let (mut system, _v1, _dir) = deployment_with(&v2, 1, rollout).await?;
    let shown = traffic(
        &mut system,
        30,
        |d| d.iter().any(|(what, _)| what == "promoted"),
        |_, _| {},
    )
    .await?;
    let expected: Vec<(String, u64)> = vec![("start".to_owned(), 0), ("promoted".to_owned(), 0)];
    assert_eq!(decided(&shown), expected, "{shown}");
    assert_eq!(row(&shown, "2")["state"], "current", "{shown}");
    Ok(())
}

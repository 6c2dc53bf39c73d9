//! Checking a new version on recorded work before rolling it out: a replay
//! keeps the versions its session ran on (at zero tokens), `--as
//! TYPE@VERSION` runs a replay or a fork of a conversation on another
//! version, and `baton diff` names where the two answers part.

use std::time::Duration;

use baton_testkit::FakeLlm;
use serde_json::Value;

use super::versions::answered_by;
use crate::util::{System, counting_model, llm_table, session_in, wants};

/// An LLM spec of `helper` at `version`, on the stand-in `llm`.
fn helper(version: &str, llm: &FakeLlm) -> String {
    let table = llm_table(llm, "");
    // Each version has its own prompt, as a new version would.
    let table = table.replace("Be brief.", &format!("Be brief (version {version})."));
    format!("name = \"helper\"\nkind = \"llm\"\nversion = \"{version}\"\n{table}")
}

/// The user messages of a recorded request.
fn users(body: &Value) -> Vec<String> {
    (body["messages"].as_array().into_iter().flatten())
        .filter(|message| message["role"] == "user")
        .filter_map(|message| message["content"].as_str().map(str::to_owned))
        .collect()
}

/// The replay's session in what `baton replay --wait` printed: `replaying
/// OLD as NEW`.
fn replay_in(stdout: &str) -> anyhow::Result<String> {
    let mut words = stdout.split_whitespace();
    words.find(|word| *word == "as");
    let new = words
        .next()
        .ok_or_else(|| anyhow::anyhow!("no replay in {stdout}"))?;
    Ok(new.parse::<uuid::Uuid>()?.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_is_tried_on_recorded_sessions_and_conversations_before_its_rollout()
-> anyhow::Result<()> {
    let (one, two) = (counting_model("one")?, counting_model("two")?);
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system.router(&[]).await?;
    for (version, llm) in [("1", &one), ("2", &two)] {
        let path = dir.path().join(format!("helper-{version}.toml"));
        std::fs::write(&path, helper(version, llm))?;
        system
            .spec_worker(&format!("v{version}"), &path, &[])
            .await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            (answer.candidates.iter()).any(|c| c.agent == "helper" && c.versions.len() == 2)
        })
        .await?;

    // Version 1 came first, so it is current: it answers everything.
    let sent = system.baton_stdout(&["send", "--to", "helper", "--wait", "What is 2 + 2?"])?;
    let recorded = session_in(&sent)?.to_owned();
    let id = "trial";
    for text in ["Hello", "Which plan am I on?"] {
        system.baton_stdout(&[
            "send",
            "--conversation",
            id,
            "--to",
            "helper",
            "--wait",
            text,
        ])?;
    }
    assert_eq!((one.requests().len(), two.requests().len()), (3, 0));

    // Version 2 becomes current; a replay still runs on version 1, the
    // version it recorded, reusing its answer: no model is asked.
    system.baton_stdout(&["rollout", "helper", "--to", "2", "--weight", "100"])?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let replayed = system.baton_stdout(&["replay", &recorded, "--wait"])?;
    let replay = replay_in(&replayed)?;
    assert_eq!(answered_by(&system, &replay).await?, "1");
    assert_eq!((one.requests().len(), two.requests().len()), (3, 0));

    // Onto version 2: its model is asked what version 1's was.
    let onto = ["replay", &recorded, "--as", "helper@2", "--wait"];
    let on_two = system.baton_stdout(&onto)?;
    let on_two = replay_in(&on_two)?;
    assert_eq!(answered_by(&system, &on_two).await?, "2");
    assert_eq!((one.requests().len(), two.requests().len()), (3, 1));
    assert_eq!(users(&two.requests()[0].body), ["What is 2 + 2?"]);
    let diff = system.baton(&["diff", &recorded, &on_two, "--json", "--exit-code"]);
    let diff = tokio::task::block_in_place(|| { diff }.output())?;
    assert_eq!(diff.status.code(), Some(1), "{diff:?}");
    let parts: Value = serde_json::from_slice(&diff.stdout)?;
    let part = |what: &str| {
        (parts["parts"].as_array().into_iter().flatten())
            .find(|part| part["part"] == what)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(part("versions")["text"], "helper@1 | helper@2", "{parts}");
    assert_eq!(part("answers")["same"], false, "{parts}");
    assert!(
        part("answers")["text"]
            .as_str()
            .unwrap_or_default()
            .contains("two 1"),
        "{parts}"
    );

    // A fork of the conversation after turn 1, onto version 2: its next
    // turn asks version 2's model what turn 2 asked version 1's.
    let fork = [
        "conversations",
        "fork",
        id,
        "--at",
        "1",
        "--as",
        "helper@2",
        "--id",
        "trial-2",
    ];
    assert_eq!(system.baton_stdout(&fork)?, "trial-2\n");
    let show = |id: &str| -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&system.baton_stdout(&[
            "conversations",
            "show",
            id,
            "--json",
        ])?)?)
    };
    let forked = show("trial-2")?;
    assert_eq!(forked["versions"]["helper"], "2", "{forked}");
    assert_eq!(forked["moves"][0]["turn"], 2, "{forked}");
    assert_eq!(forked["moves"][0]["from"], "1", "{forked}");
    system.baton_stdout(&[
        "send",
        "--conversation",
        "trial-2",
        "--wait",
        "Which plan am I on?",
    ])?;
    assert_eq!((one.requests().len(), two.requests().len()), (3, 2));
    assert_eq!(
        users(&two.requests()[1].body),
        ["Hello", "Which plan am I on?"]
    );
    let turn_two = |shown: &Value| {
        shown["turns_listed"][1]["session"]
            .as_str()
            .map(str::to_owned)
    };
    let (theirs, ours) = (turn_two(&show(id)?), turn_two(&show("trial-2")?));
    let (Some(theirs), Some(ours)) = (theirs, ours) else {
        anyhow::bail!("turn 2 is missing from one of the conversations");
    };
    assert_eq!(answered_by(&system, &theirs).await?, "1");
    assert_eq!(answered_by(&system, &ours).await?, "2");
    let diff = system.baton_stdout(&["diff", &theirs, &ours])?;
    assert!(
        diff.contains("versions: differ: helper@1 | helper@2"),
        "{diff}"
    );
    // The source goes on on version 1.
    system.baton_stdout(&["send", "--conversation", id, "--wait", "Thanks"])?;
    assert_eq!((one.requests().len(), two.requests().len()), (4, 2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_or_replay_onto_a_version_no_worker_runs_is_refused_naming_the_fix()
-> anyhow::Result<()> {
    let one = counting_model("one")?;
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    system.router(&[]).await?;
    let path = dir.path().join("helper-1.toml");
    std::fs::write(&path, helper("1", &one))?;
    system.spec_worker("v1", &path, &["--no-registry"]).await?;
    let sent = system.baton_stdout(&["send", "--to", "helper", "--wait", "hi"])?;
    let recorded = session_in(&sent)?.to_owned();
    system.baton_stdout(&[
        "send",
        "--conversation",
        "c",
        "--to",
        "helper",
        "--wait",
        "hi",
    ])?;
    let cases: [(&[&str], &str); 4] = [
        (
            &["replay", &recorded, "--as", "helper@9"],
            "no worker of version 9 of agent type helper has run",
        ),
        (
            &[
                "conversations",
                "fork",
                "c",
                "--at",
                "1",
                "--as",
                "helper@9",
            ],
            "`baton worker --version 9`",
        ),
        (&["replay", &recorded, "--as", "helper@a.b"], "a.b"),
        (
            &[
                "conversations",
                "fork",
                "c",
                "--at",
                "1",
                "--as",
                "helper@1",
                "--as",
                "x",
                "--as",
                "y",
            ],
            "the new id is given already",
        ),
    ];
    for (args, why) in cases {
        let output = tokio::task::block_in_place(|| system.baton(args).output())?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }
    // Nothing was sent: one model call per session, no more.
    assert_eq!(one.requests().len(), 2);
    Ok(())
}

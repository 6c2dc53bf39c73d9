//! A Python agent's sessions looked back on and moved on: `baton replay`
//! from a hop and onto another version, `baton diff`, sessions pinned to
//! the version they started on across a question answered after a
//! rollout, a conversation the agent holds and hands back, and its steps
//! on the console's session page. The stand-in model counts its requests,
//! the order server logs each refund, and each step's side effect is
//! counted in a file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{Event, EventType};
use baton_testkit::FakeLlm;
use serde_json::Value as Json;

use super::{Coder, llm_table, output, shown};
use crate::util::{agents, counting_model, kinds, wants};

/// The `[llm]` table of the stand-in `llm`, and the stdio order server,
/// its refunds logged to `log`.
fn tables(llm: &FakeLlm, log: &Path) -> String {
    let server = crate::reliability::tools::orders_server();
    let log = log.to_string_lossy();
    let mcp =
        format!("\n[[mcp]]\ncommand = [\"env\", \"ORDERS_LOG={log}\", \"python3\", {server:?}]\n");
    llm_table(llm, &mcp)
}

/// The stand-in model (it answers "said"), a folder for the order
/// server's refund log, the log, and [`tables`] for the two.
pub(super) fn stand_ins() -> anyhow::Result<(FakeLlm, tempfile::TempDir, std::path::PathBuf, String)>
{
    let llm = counting_model("said")?;
    let logs = tempfile::tempdir()?;
    let log = logs.path().join("refunds.jsonl");
    let tables = tables(&llm, &log);
    Ok((llm, logs, log, tables))
}

pub(super) fn refunds(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

impl Coder {
    /// `coder`'s spec as agent type `name` (at `version`, if any), with
    /// `env` set for its program (`""` unsets a variable for the program's
    /// reading): the new spec's path.
    fn variant(
        &self,
        name: &str,
        version: Option<&str>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<PathBuf> {
        let text = std::fs::read_to_string(&self.spec)?;
        let mut lines = Vec::new();
        let mut set: Vec<&str> = Vec::new();
        let mut in_env = false;
        for line in text.lines() {
            let kept = env
                .iter()
                .find(|(key, _)| in_env && line.starts_with(&format!("{key} = ")));
            if let Some((key, value)) = kept {
                lines.push(format!("{key} = {value:?}"));
                set.push(key);
            } else if line == "name = \"coder\"" {
                lines.push(format!("name = {name:?}"));
                lines.extend(version.map(|v| format!("version = {v:?}")));
            } else {
                lines.push(line.to_owned());
            }
            if line.starts_with('[') || line.is_empty() {
                in_env = line == "[exec.env]";
            }
        }
        let added: Vec<String> = (env.iter())
            .filter(|(key, _)| !set.contains(key))
            .map(|(key, value)| format!("{key} = {value:?}"))
            .collect();
        let at = lines.iter().position(|l| l == "[exec.env]");
        let at = at.ok_or_else(|| anyhow::anyhow!("no [exec.env] in {text}"))?;
        lines.splice(at + 1..at + 1, added);
        let path = self
            .dir
            .path()
            .join(format!("{name}-{}.toml", version.unwrap_or("unversioned")));
        std::fs::write(&path, lines.join("\n") + "\n")?;
        Ok(path)
    }
}

/// `baton replay SESSION FLAGS --wait --json`: the terminal event printed.
fn replayed(t: &Coder, session: &str, flags: &[&str]) -> anyhow::Result<Json> {
    let mut args = vec!["replay", session];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--wait", "--json", "--timeout-secs", "60"]);
    let stdout = t.baton(&args)?;
    let line = (stdout.lines().rev())
        .find(|line| line.starts_with('{'))
        .ok_or_else(|| anyhow::anyhow!("no JSON outcome in {stdout}"))?;
    let end: Json = serde_json::from_str(line)?;
    anyhow::ensure!(end["type"] == "completed", "{stdout}");
    Ok(end)
}

/// The session's events until its end, from its id as JSON text.
async fn events_of(t: &Coder, session: &Json) -> anyhow::Result<Vec<Event>> {
    let session = session.as_str().unwrap_or_default().parse()?;
    t.system
        .session_events(session, Duration::from_secs(60))
        .await
}

/// The versions of `agent` that `events` name, each once, in order.
fn versions_of(events: &[Event], agent: &str) -> Vec<String> {
    let mut named: Vec<String> = (events.iter())
        .filter(|e| e.agent.as_deref() == Some(agent))
        .filter_map(|e| e.version.as_ref().map(ToString::to_string))
        .collect();
    named.dedup();
    named
}

/// How many times each of `effects` ran.
pub(super) fn counted<const N: usize>(t: &Coder, effects: [&str; N]) -> [usize; N] {
    effects.map(|effect| t.count(effect))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_from_the_second_hop_reuses_the_first_hops_step_model_and_tool()
-> anyhow::Result<()> {
    let (llm, _logs, log, tables) = stand_ins()?;
    let front = [("REFUND", "1"), ("NEXT", "closer")];
    let mut t = Coder::start("history", &front, &tables).await?;
    let closer = t.variant("closer", None, &[("REFUND", ""), ("NEXT", "")])?;
    t.worker("w1").await?;
    (t.system)
        .spec_worker("closer", &closer, &["--no-registry"])
        .await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let (events, end) = t.completed(&task).await?;
    assert_eq!(agents(&end.path), ["coder", "closer"]);
    let first = output(&end);
    assert_eq!(first["answer"], "said 2", "{first}");
    assert_eq!(first["prepared"]["by"], "closer", "{first}");
    // What hop 1's step and model call returned, as it handed them on.
    let hop_one = serde_json::json!({
        "coder_prepared": {"text": "Please refund order ABC-123.", "by": "coder"},
        "coder_answer": "said 1",
    });
    assert_eq!(first["before"], hop_one, "{first}");
    assert_eq!((llm.requests().len(), refunds(&log)), (2, 1));
    let effects = ["coder:prepare", "closer:prepare"];
    assert_eq!(counted(&t, effects), [1, 1], "{:?}", t.counts());
    assert_eq!(
        shown(&events),
        ["step:prepare ok", "refund_order ok", "step:prepare ok"]
    );
    let session = task.session.to_string();

    // Unchanged: every step, answer and refund is reused.
    let again = replayed(&t, &session, &[])?;
    // Each hop gets its own recorded results, though both made a step of
    // one name and asked the model the same.
    assert_eq!(again["output"], first, "{again}");
    assert_eq!((llm.requests().len(), refunds(&log)), (2, 1));
    assert_eq!(counted(&t, effects), [1, 1], "{:?}", t.counts());
    let replay = events_of(&t, &again["session"]).await?;
    assert!(
        shown(&replay).is_empty(),
        "nothing ran: {:?}",
        shown(&replay)
    );

    // From hop 2: hop 1's step, answer and refund are reused; hop 2's step
    // runs again and its model is asked again, what it was asked before.
    let from = replayed(&t, &session, &["--from", "2"])?;
    assert_eq!(from["output"]["answer"], "said 3", "{from}");
    assert_eq!(from["output"]["before"], hop_one, "{from}");
    let requests = llm.requests();
    assert_eq!((requests.len(), refunds(&log)), (3, 1));
    assert_eq!(requests[2].body["messages"], requests[1].body["messages"]);
    assert_eq!(counted(&t, effects), [1, 2], "{:?}", t.counts());
    let replay = events_of(&t, &from["session"]).await?;
    assert_eq!(shown(&replay), ["step:prepare ok"], "{:?}", kinds(&replay));
    let hops: Vec<&str> = (from["path"].as_array().into_iter().flatten())
        .filter_map(|hop| hop["agent"].as_str())
        .collect();
    assert_eq!(hops, ["coder", "closer"], "{from}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_gives_each_of_two_same_calls_in_a_hop_its_own_result() -> anyhow::Result<()> {
    let (llm, _logs, log, tables) = stand_ins()?;
    let env = [("REFUND", "1"), ("TWICE", "1")];
    let mut t = Coder::start("history", &env, &tables).await?;
    t.worker("w1").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let (_, end) = t.completed(&task).await?;
    let first = output(&end);
    // The same request twice, the same refund twice: each its own result.
    assert_eq!(
        (first["answer"].as_str(), first["again"].as_str()),
        (Some("said 1"), Some("said 2")),
        "{first}"
    );
    assert_ne!(first["refund"], first["refund_again"], "{first}");
    assert_eq!((llm.requests().len(), refunds(&log)), (2, 2));
    // A replay answers each call with the result recorded at its place.
    let again = replayed(&t, &task.session.to_string(), &[])?;
    assert_eq!(again["output"], first, "{again}");
    assert_eq!((llm.requests().len(), refunds(&log)), (2, 2));
    Ok(())
}

/// `coder` in `mode` (with `env` and `extra`) as versions 1 and 2, their
/// programs told apart by FLAVOUR (`one`, `two`); a registry; both workers
/// live. Version 1 started first, so it is current.
pub(super) async fn two_versions(
    mode: &str,
    env: &[(&str, &str)],
    extra: &str,
) -> anyhow::Result<Coder> {
    let mut t = Coder::start(mode, env, extra).await?;
    t.system.registry("registry").await?;
    let one = t.variant("coder", Some("1"), &[("FLAVOUR", "one")])?;
    let two = t.variant("coder", Some("2"), &[("FLAVOUR", "two")])?;
    t.system.spec_worker("v1", &one, &[]).await?;
    t.system.spec_worker("v2", &two, &[]).await?;
    t.system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            (answer.candidates.iter()).any(|c| c.agent == "coder" && c.versions.len() == 2)
        })
        .await?;
    Ok(t)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_as_version_two_runs_its_program_on_the_recorded_calls_and_diff_shows_it()
-> anyhow::Result<()> {
    let (llm, _logs, log, tables) = stand_ins()?;
    let t = two_versions("history", &[("REFUND", "1")], &tables).await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let (events, end) = t.completed(&task).await?;
    assert_eq!(versions_of(&events, "coder"), ["1"]);
    let first = output(&end);
    assert_eq!(
        (first["version"].as_str(), first["flavour"].as_str()),
        (Some("1"), Some("one"))
    );
    assert_eq!((llm.requests().len(), refunds(&log)), (1, 1));
    let effects = ["coder:prepare", "coder:one", "coder:two"];
    assert_eq!(counted(&t, effects), [1, 1, 0], "{:?}", t.counts());

    // Onto version 2: its program runs, and gets the recorded step, answer
    // and refund; only its own step is new.
    let original = task.session.to_string();
    let onto = replayed(&t, &original, &["--as", "coder@2"])?;
    let out = &onto["output"];
    assert_eq!(
        (out["version"].as_str(), out["flavour"].as_str()),
        (Some("2"), Some("two")),
        "{onto}"
    );
    assert_eq!(out["answer"], "said 1", "{onto}");
    assert_eq!(out["refund"], first["refund"], "{onto}");
    assert_eq!((llm.requests().len(), refunds(&log)), (1, 1));
    assert_eq!(counted(&t, effects), [1, 1, 1], "{:?}", t.counts());
    let replay = events_of(&t, &onto["session"]).await?;
    assert_eq!(versions_of(&replay, "coder"), ["2"], "{:?}", kinds(&replay));
    assert_eq!(shown(&replay), ["step:flavour-two ok"]);

    // The diff names the versions and what each said, and the replay
    // spent nothing.
    let session = onto["session"].as_str().unwrap_or_default();
    let diff = t.baton(&["diff", &original, session])?;
    for part in [
        "path:    same: coder",
        "versions: differ: coder@1 | coder@2",
        "answers: differ: at answer 1: coder: coder@1 (one): said 1 | coder: coder@2 (two): said 1",
        "outcome: differ: completed:",
        "| 0 tokens (0 in, 0 out)",
        &format!("replay:  same: one replays {original}"),
    ] {
        assert!(diff.contains(part), "{part:?} in {diff}");
    }
    Ok(())
}

/// The question `session` waits on in the inbox, once it is there: its id.
async fn question(t: &Coder, session: &str) -> anyhow::Result<String> {
    let entry = baton_testkit::eventually(Duration::from_secs(30), || async {
        let entries = t.inbox()?;
        (entries.iter())
            .find(|e| e["reason"] == "input_required" && e["session"] == session)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no question of {session} yet: {entries:?}"))
    })
    .await?;
    Ok(entry["id"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_on_version_one_keeps_it_across_a_question_answered_after_the_rollout()
-> anyhow::Result<()> {
    let t = two_versions("pinned", &[], "").await?;
    let first = t.send("Refund my order.").await?;
    let first_id = first.session.to_string();
    let asked_first = question(&t, &first_id).await?;

    // Version 2 becomes current while the first session waits for its answer.
    t.baton(&["rollout", "coder", "--to", "2", "--weight", "100"])?;
    let shown: Json = serde_json::from_str(&t.baton(&["versions", "coder", "--json"])?)?;
    assert_eq!(
        (shown["current"].as_str(), shown["previous"].as_str()),
        (Some("2"), Some("1"))
    );
    let sent = t.baton(&["send", "--to", "coder", "--direct", "Refund another."])?;
    let second_id = crate::util::session_in(&sent)?.to_owned();
    let asked_second = question(&t, &second_id).await?;

    // The answer to the first session's question reaches version 1.
    t.baton(&["inbox", "reply", &asked_first, "ABC-123"])?;
    let (events, end) = t.completed(&first).await?;
    assert_eq!(versions_of(&events, "coder"), ["1"], "{:?}", kinds(&events));
    let expected = serde_json::json!({"order": "ABC-123", "flavour": "one", "version": "1"});
    assert_eq!(output(&end), expected);
    assert_eq!(
        end.versions.get("coder").map(|version| version.as_str()),
        Some("1")
    );

    t.baton(&["inbox", "reply", &asked_second, "XYZ-9"])?;
    let events = events_of(&t, &Json::from(second_id)).await?;
    let end = events.last().context("the second session has no events")?;
    assert_eq!(end.kind, EventType::Completed, "{:?}", kinds(&events));
    assert_eq!(versions_of(&events, "coder"), ["2"], "{:?}", kinds(&events));
    let expected = serde_json::json!({"order": "XYZ-9", "flavour": "two", "version": "2"});
    assert_eq!(output(end), expected);
    // Each program ran its own session's steps, once each.
    let effects = ["one:before", "one:after", "two:before", "two:after"];
    assert_eq!(counted(&t, effects), [1, 1, 1, 1], "{:?}", t.counts());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_agent_holds_a_conversation_then_hands_it_back_to_the_entry() -> anyhow::Result<()>
{
    let mut t = Coder::start("holder", &[], "").await?;
    let entry = t.variant("entry", None, &[("MODE", "entry"), ("HOLDER", "coder")])?;
    t.system.router(&["--default-agent", "entry"]).await?;
    t.worker("w1").await?;
    (t.system)
        .spec_worker("entry", &entry, &["--no-registry"])
        .await?;
    let turn = |text: &str| t.baton(&["send", "--conversation", "back", "--wait", text]);
    let said = [
        turn("Refund ABC-123, please.")?,
        turn("That is done, thanks.")?,
        turn("One more thing.")?,
    ];
    let answers = [
        "holder answers turn 1: Refund ABC-123, please.",
        "holder hands back at turn 2",
        "entry answers turn 3: One more thing.",
    ];
    for (said, answer) in said.iter().zip(answers) {
        assert!(
            said.contains(&format!("answer: {answer}")),
            "{answer:?} in {said}"
        );
    }
    let shown: Json =
        serde_json::from_str(&t.baton(&["conversations", "show", "back", "--json"])?)?;
    let turns = shown["turns_listed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let agents: Vec<String> = turns
        .iter()
        .map(|turn| turn["agents"].to_string())
        .collect();
    assert_eq!(
        agents,
        [r#"["entry","coder"]"#, r#"["coder"]"#, r#"["entry"]"#],
        "{shown}"
    );
    assert_eq!(shown["holder"], "entry", "{shown}");
    // Turn 2 went to the holder alone; turn 3 to the entry alone.
    let effects = [
        "entry:1", "holder:1", "holder:2", "entry:2", "entry:3", "holder:3",
    ];
    assert_eq!(counted(&t, effects), [1, 1, 1, 0, 1, 0], "{:?}", t.counts());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_hops_steps_and_tool_calls_are_shown_in_the_order_they_ran() -> anyhow::Result<()> {
    let (_llm, _logs, _log, tables) = stand_ins()?;
    let env = [("REFUND", "1"), ("FLAVOUR", "one")];
    let mut t = Coder::start("history", &env, &tables).await?;
    let spec = t.spec.clone();
    let flags = ["--no-registry", "--accepted-after-ms", "60000"];
    t.system.spec_worker("w1", &spec, &flags).await?;
    // Steps are held for the hop's next event; the refund between them is
    // stored at once, so the step before it is stored first.
    let task = t.send("Please refund order ABC-123.").await?;
    let (events, _) = t.completed(&task).await?;
    let calls = ["step:prepare ok", "refund_order ok", "step:flavour-one ok"];
    assert_eq!(shown(&events), calls);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_a_python_agents_steps_among_its_tool_calls() -> anyhow::Result<()> {
    let (_llm, _logs, _log, tables) = stand_ins()?;
    let env = [("REFUND", "1"), ("FLAVOUR", "one")];
    let mut t = Coder::start("history", &env, &tables).await?;
    t.worker("w1").await?;
    let task = t.send("Please refund order ABC-123.").await?;
    let (events, _) = t.completed(&task).await?;
    let calls = ["step:prepare ok", "refund_order ok", "step:flavour-one ok"];
    assert_eq!(shown(&events), calls);
    let url = crate::gateways::console::console(&mut t.system, "console", &[]).await?;
    let session = task.session.to_string();
    let seen = crate::gateways::console::browser(&["tools", &url, &session])?;
    assert_eq!(
        seen["tools"],
        serde_json::json!(["step:prepare", "refund_order", "step:flavour-one"]),
        "{seen}"
    );
    assert_eq!(
        seen["outcomes"],
        serde_json::json!(["ok", "ok", "ok"]),
        "{seen}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    Ok(())
}

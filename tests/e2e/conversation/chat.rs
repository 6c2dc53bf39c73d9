//! Conversations from the command line: `baton send --conversation`,
//! `baton chat` (piped, one turn per line) and `baton conversations`. The
//! scripted model stand-ins count what each agent's model was asked.

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use baton_testkit::{FakeLlm, Scripted};

use crate::conversation::conversations::{Desk, asked, desk_with};
use crate::util::System;

/// Triage hands the first turn to refunds, which answers each turn after.
fn refund_desk(refunds: &[&str]) -> anyhow::Result<(FakeLlm, FakeLlm)> {
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = FakeLlm::start(refunds.iter().map(|text| Scripted::text(text)).collect())?;
    Ok((triage, refunds))
}

/// Runs `baton chat ARGS` with `input` on its standard input: its exit
/// status, stdout and stderr.
pub(crate) fn chat(
    system: &System,
    args: &[&str],
    input: &str,
) -> anyhow::Result<(bool, String, String)> {
    let mut command = system.baton(&[&["chat"], args].concat());
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = tokio::task::block_in_place(|| -> anyhow::Result<_> {
        let mut child = command.spawn()?;
        child
            .stdin
            .take()
            .map(|mut stdin| stdin.write_all(input.as_bytes()))
            .transpose()?;
        Ok(child.wait_with_output()?)
    })?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn send_with_a_conversation_continues_it_at_the_holder_and_show_lists_its_turns()
-> anyhow::Result<()> {
    let (triage, refunds) = refund_desk(&["Who are you?", "Refund done, Ada."])?;
    let (system, _url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let id = "cli-1";
    let first = [
        "send",
        "--conversation",
        id,
        "--wait",
        "Refund ABC-123, please.",
    ];
    let stdout = system.baton_stdout(&first)?;
    assert!(stdout.contains("answer: Who are you?"), "{stdout}");
    let second = system.baton_stdout(&["send", "--conversation", id, "--wait", "I am Ada."])?;
    assert!(second.contains("answer: Refund done, Ada."), "{second}");
    // Turn 2 went to the holder, refunds, which saw turn 1 and its answer.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 2));
    let seen = asked(&refunds, 1);
    assert!(
        seen.iter().any(|m| m == "user: Refund ABC-123, please.")
            && seen.iter().any(|m| m == "assistant: Who are you?")
            && seen.last().map(String::as_str) == Some("user: I am Ada."),
        "{seen:#?}"
    );
    // The turns in order, each with its session and its agents.
    let shown = system.baton_stdout(&["conversations", "show", id, "--json"])?;
    let shown: serde_json::Value = serde_json::from_str(&shown)?;
    assert_eq!(shown["holder"], "refunds", "{shown}");
    assert_eq!(shown["turns"], 2, "{shown}");
    let turns = shown["turns_listed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let agents: Vec<String> = turns.iter().map(|t| t["agents"].to_string()).collect();
    assert_eq!(
        agents,
        [r#"["triage","refunds"]"#, r#"["refunds"]"#],
        "{shown}"
    );
    let texts: Vec<&str> = turns.iter().filter_map(|t| t["text"].as_str()).collect();
    assert_eq!(texts, ["Refund ABC-123, please.", "I am Ada."]);
    assert!(turns.iter().all(|t| t["ended"] == "completed"), "{shown}");
    let session = turns[1]["session"].as_str().unwrap_or_default();
    assert!(
        second.contains(session),
        "turn 2 ran as {session}: {second}"
    );
    let listed = system.baton_stdout(&["conversations", "ls"])?;
    assert!(
        listed.starts_with("cli-1  2 turns  holder refunds  idle"),
        "{listed}"
    );
    // An unknown conversation is a clear error.
    let output = system.baton(&["conversations", "show", "nope"]).output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("no conversation nope"), "{stderr}");
    // Deleted: the record, the turns and their events; then a clear error.
    let sessions: Vec<uuid::Uuid> = turns
        .iter()
        .filter_map(|t| t["session"].as_str()?.parse().ok())
        .collect();
    assert!(!system.stored_events(sessions[0]).await?.is_empty());
    let deleted = system.baton_stdout(&["conversations", "delete", id])?;
    assert_eq!(
        deleted,
        "deleted conversation cli-1 and the events of 2 sessions\n"
    );
    for session in &sessions {
        assert_eq!(system.stored_events(*session).await?.len(), 0, "{session}");
    }
    for args in [
        &["conversations", "show", id][..],
        &["send", "--conversation", id, "--wait", "Hello again."][..],
        &["conversations", "delete", id][..],
    ] {
        let output = system.baton(args).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(
            stderr.contains("this conversation was deleted"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(refunds.requests().len(), 2, "no turn ran after the delete");
    let listed = system.baton_stdout(&["conversations", "ls"])?;
    assert!(!listed.contains("cli-1"), "{listed}");
    let left = crate::conversation::transcripts::entries(&system, id).await?;
    assert!(
        left.is_empty(),
        "the transcript outlived its conversation: {left:?}"
    );
    Ok(())
}

/// Whether `baton conversations show ID` fails saying `why`.
fn show_fails(system: &System, id: &str, why: &str) -> anyhow::Result<()> {
    let output = system.baton(&["conversations", "show", id]).output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        !output.status.success() && stderr.contains(why),
        "show {id}: {stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_conversation_expires_with_its_transcript_and_its_id_starts_afresh()
-> anyhow::Result<()> {
    let (triage, refunds) = refund_desk(&["Who are you?", "Refund done, Ada.", "Hi.", "Hello."])?;
    let more = Desk {
        router: &["--conversation-ttl-secs", "3"],
        ..Desk::default()
    };
    let (system, _url, _dir) = desk_with(&triage, &refunds, more, &[]).await?;
    let (idle, gone) = ("idle-1", "gone-1");
    for text in ["Refund ABC-123, please.", "I am Ada."] {
        system.baton_stdout(&["send", "--conversation", idle, "--wait", text])?;
    }
    let created = [
        "send",
        "--conversation",
        gone,
        "--to",
        "refunds",
        "--wait",
        "Hi.",
    ];
    system.baton_stdout(&created)?;
    baton_testkit::eventually(Duration::from_secs(10), || async {
        let keys = crate::conversation::transcripts::entries(&system, idle).await?;
        anyhow::ensure!(keys.len() == 2, "{keys:?}");
        Ok(())
    })
    .await?;
    baton_testkit::eventually(Duration::from_secs(10), || async {
        system
            .baton(&["conversations", "delete", gone])
            .output()
            .map_err(anyhow::Error::from)
            .and_then(|out| {
                if out.status.success() {
                    Ok(())
                } else {
                    anyhow::bail!("{}", String::from_utf8_lossy(&out.stderr))
                }
            })
    })
    .await?;
    show_fails(&system, gone, "this conversation was deleted")?;
    // Idle for its time to live: removed, with its listed turns and its
    // transcript; and the deleted one's marker with it.
    baton_testkit::eventually(Duration::from_secs(30), || async {
        show_fails(&system, idle, "no conversation idle-1")?;
        show_fails(&system, gone, "no conversation gone-1")
    })
    .await?;
    assert!(
        crate::conversation::transcripts::entries(&system, idle)
            .await?
            .is_empty()
    );
    let listed = system.baton_stdout(&["conversations", "ls"])?;
    assert!(!listed.contains(idle) && !listed.contains(gone), "{listed}");
    // The id starts a new conversation, which remembers nothing.
    let again = [
        "send",
        "--conversation",
        idle,
        "--to",
        "refunds",
        "--wait",
        "Hi again.",
    ];
    let stdout = system.baton_stdout(&again)?;
    assert!(stdout.contains("answer: Hello."), "{stdout}");
    assert_eq!(
        asked(&refunds, 3)
            .iter()
            .filter(|m| m.starts_with("user: "))
            .count(),
        1
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn piped_chat_answers_each_line_as_a_turn_with_memory() -> anyhow::Result<()> {
    let (triage, refunds) = refund_desk(&["Who are you?", "Refund done, Ada."])?;
    let desk = Desk {
        router: &["--metrics-addr", "127.0.0.1:0"],
        ..Desk::default()
    };
    let (mut system, _url, _dir) = desk_with(&triage, &refunds, desk, &[]).await?;
    let (ok, stdout, stderr) = chat(&system, &[], "Refund ABC-123, please.\nI am Ada.\n")?;
    assert!(ok, "{stdout}{stderr}");
    // Standard output holds the answers alone, one turn per line.
    assert_eq!(stdout, "Who are you?\nRefund done, Ada.\n", "{stderr}");
    // Around them: the new conversation's id, the handoff, who holds it.
    assert!(
        stderr.contains("continue it later with --conversation"),
        "{stderr}"
    );
    assert!(stderr.contains("handoff triage -> refunds"), "{stderr}");
    assert!(
        stderr.contains("[refunds holds the conversation]"),
        "{stderr}"
    );
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 2));
    let seen = asked(&refunds, 1);
    assert!(
        seen.iter().any(|m| m == "assistant: Who are you?"),
        "{seen:#?}"
    );
    // The router's keeper counted both turns, and none runs now.
    let url = crate::operations::metrics::metrics_url(system.process("router").stderr())?;
    let counted = baton_testkit::eventually(std::time::Duration::from_secs(10), || async {
        let samples = crate::operations::metrics::scrape(&url)?;
        let turns =
            crate::operations::metrics::value(&samples, "baton_conversation_turns_total", &[]);
        let active = crate::operations::metrics::value(&samples, "baton_conversations_active", &[]);
        anyhow::ensure!(
            (turns, active) == (2.0, 0.0),
            "turns {turns}, active {active}"
        );
        Ok((turns, active))
    })
    .await?;
    assert_eq!(counted, (2.0, 0.0));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_answers_an_agents_question_with_the_next_line() -> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![
        Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]),
        Scripted::text("Refunding ABC-123."),
    ])?;
    let refunds = FakeLlm::start(vec![])?;
    let (system, _url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let id = "cli-ask";
    let (ok, stdout, stderr) = chat(
        &system,
        &["--conversation", id],
        "I want a refund.\nABC-123\n",
    )?;
    assert!(ok, "{stdout}{stderr}");
    assert_eq!(stdout, "Which order?\nRefunding ABC-123.\n", "{stderr}");
    // The answer resumed the same turn: two model calls, one turn.
    assert_eq!(triage.requests().len(), 2);
    let shown = system.baton_stdout(&["conversations", "show", id, "--json"])?;
    let shown: serde_json::Value = serde_json::from_str(&shown)?;
    assert_eq!(shown["turns"], 1, "{shown}");
    Ok(())
}

/// The README's `baton chat` example: the lines the user typed, and what
/// `baton chat` printed, one per line.
fn readme_chat() -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"),
    )?;
    let block = readme
        .split("```sh\n$ baton chat\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .ok_or_else(|| anyhow::anyhow!("the README has no `$ baton chat` example"))?;
    let (typed, printed): (Vec<&str>, Vec<&str>) =
        block.lines().partition(|line| line.starts_with("you> "));
    Ok((
        typed
            .iter()
            .map(|line| line["you> ".len()..].to_owned())
            .collect(),
        printed.iter().map(|line| (*line).to_owned()).collect(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_chat_example_is_what_baton_chat_prints_with_the_demos_agents()
-> anyhow::Result<()> {
    let (typed, printed) = readme_chat()?;
    assert_eq!(typed.len(), 2, "{typed:?}");
    // As the README runs it: the demo's agents, a registry and a router.
    let system = crate::routing::registry::demo_system().await?;
    baton_testkit::eventually(Duration::from_secs(10), || async {
        let agents = system.baton_stdout(&["agents"])?;
        anyhow::ensure!(agents.contains("refund"), "{agents}");
        Ok(())
    })
    .await?;
    let (ok, stdout, stderr) = chat(&system, &[], &(typed.join("\n") + "\n"))?;
    assert!(ok, "{stdout}{stderr}");
    // Piped, answers go to standard output alone, and the rest to
    // standard error; on a terminal, each answer follows its agent's name.
    let (mut answers, mut around) = (stdout.lines(), stderr.lines());
    let id = stderr
        .lines()
        .find_map(|line| {
            line.strip_prefix("conversation ")?
                .split_whitespace()
                .next()
        })
        .ok_or_else(|| anyhow::anyhow!("no conversation id in {stderr}"))?;
    for line in &printed {
        let line = line.replace("6f1c…", id);
        match line.split_once(": ") {
            Some((agent, said)) if !agent.contains(' ') && !line.starts_with("  ") => {
                assert_eq!(answers.next(), Some(said), "{agent} said, in {stdout}");
            }
            _ => {
                let next =
                    around.find(|shown| !shown.contains(" INFO ") && !shown.contains(" WARN "));
                assert_eq!(next, Some(line.as_str()), "in {stderr}");
            }
        }
    }
    assert_eq!(answers.next(), None, "{stdout}");
    Ok(())
}

/// An exec agent that asks twice, then answers with both answers; each
/// run appends a line to `runs` in its folder.
const ASKER: &str = r#"
import json, sys
envelope = json.load(sys.stdin)
answers = envelope["context"]["state"].get("answers") or []
with open("runs", "a") as runs:
    runs.write(envelope["context"]["messages"][-1]["content"] + "\n")
if len(answers) < 2:
    print(json.dumps({"ask": f"Question {len(answers) + 1}?"}))
else:
    print(json.dumps({"action": "terminate", "output": " and ".join(a["answer"] for a in answers)}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn send_answers_an_exec_agents_questions_and_it_runs_again_each_time() -> anyhow::Result<()> {
    let spec = "name = \"asker\"\nkind = \"exec\"\n[exec]\ncommand = [\"python3\", \"asker.py\"]\n";
    let (mut system, dir) = crate::util::spec_workers(&[("asker", spec.to_owned())]).await?;
    system.router(&[]).await?;
    std::fs::write(dir.path().join("asker.py"), ASKER)?;
    let id = "exec-ask";
    // `send --wait` exits 3 while the session waits for an answer.
    let send = |text: &str| {
        let args = [
            "send",
            "--to",
            "asker",
            "--conversation",
            id,
            "--wait",
            text,
        ];
        let output = tokio::task::block_in_place(|| system.baton(&args).output())?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        anyhow::Ok((output.status.code(), stdout))
    };
    let (code, first) = send("Book a table.")?;
    assert_eq!(code, Some(3), "{first}");
    assert!(first.contains("waiting: Question 1?"), "{first}");
    let (code, second) = send("For two.")?;
    assert_eq!(code, Some(3), "{second}");
    assert!(second.contains("waiting: Question 2?"), "{second}");
    let (code, third) = send("At eight.")?;
    assert_eq!(code, Some(0), "{third}");
    assert!(third.contains("answer: For two. and At eight."), "{third}");
    // Three runs of one turn, each with the latest message last.
    let runs = std::fs::read_to_string(dir.path().join("runs"))?;
    assert_eq!(runs, "Book a table.\nFor two.\nAt eight.\n");
    let shown = system.baton_stdout(&["conversations", "show", id, "--json"])?;
    let shown: serde_json::Value = serde_json::from_str(&shown)?;
    assert_eq!(shown["turns"], 1, "{shown}");
    Ok(())
}

//! A conversation reads like a conversation, in the console (in a real
//! browser and over plain HTTP) and in `baton conversations show`: each
//! turn's message, the question an agent asked the user and the answer the
//! next message gave, the answer with the agent and version that gave it
//! (`helper@2`), the handoff within a turn, the versions the conversation
//! is pinned to, and a long answer folded.

use std::time::Duration;

use crate::gateways::console::{console, get};
use crate::util::{System, session_in, wants};

/// `front` (version 1) hands every task to `helper`.
const FRONT: &str = r#"
import json, sys
json.load(sys.stdin)
print(json.dumps({"action": "handoff", "to": "helper"}))
"#;

/// `helper` (version 2) asks how many people before it books, and answers
/// the menu at length.
const HELPER: &str = r#"
import json, sys
envelope = json.load(sys.stdin)
last = envelope["context"]["messages"][-1]["content"]
if last == "Book a table.":
    reply = {"ask": "How many people?"}
elif last == "For two.":
    reply = {"action": "terminate", "output": "Booked a table for two."}
elif last == "What is on the menu?":
    reply = {"action": "terminate", "output": MENU}
else:
    reply = {"action": "terminate", "output": "Sorry?"}
print(json.dumps(reply))
"#;

/// The long answer: ten lines, of which the page shows the first three
/// until it is opened.
const MENU: [&str; 10] = [
    "Tonight's menu:",
    "1. Tomato soup",
    "2. Green salad",
    "3. Mushroom risotto",
    "4. Grilled trout",
    "5. Lemon tart",
    "6. Cheese plate",
    "7. Coffee",
    "8. Mint tea",
    "Book by eight.",
];

const ID: &str = "dinner-1";

/// An exec spec of `name` at `version`, running `NAME.py` in its folder.
fn spec(name: &str, version: &str) -> String {
    format!(
        "name = \"{name}\"\nkind = \"exec\"\nversion = \"{version}\"\n[exec]\ncommand = [\"python3\", \"{name}.py\"]\n"
    )
}

/// Runs a phase of `scripts/console_conversations.py`; its JSON answer.
fn browser(args: &[&str]) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(
        std::path::Path::new("/usr/bin/chromium").exists()
            || std::env::var_os("CHROMIUM").is_some(),
        "the browser tests need Chromium: apt-get install chromium (or set CHROMIUM)"
    );
    crate::util::python_json("console_conversations.py", "playwright", args)
}

/// `baton send --conversation ID --wait TEXT`: its exit code and stdout.
fn send(system: &System, text: &str, to: Option<&str>) -> anyhow::Result<(Option<i32>, String)> {
    let mut args = vec!["send", "--conversation", ID, "--wait", text];
    if let Some(to) = to {
        args.extend(["--to", to]);
    }
    let output = tokio::task::block_in_place(|| system.baton(&args).output())?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    Ok((output.status.code(), stdout))
}

/// The text of `html` between the first `from` and the next `to` after it.
fn between<'a>(html: &'a str, from: &str, to: &str) -> &'a str {
    let start = html.find(from).unwrap_or(html.len());
    let rest = &html[start..];
    &rest[..rest.find(to).unwrap_or(rest.len())]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversations_page_and_show_read_each_turns_message_question_and_versioned_answer()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let menu = MENU.join("\n");
    let helper = HELPER.replace("MENU", &serde_json::to_string(&menu)?);
    std::fs::write(dir.path().join("front.py"), FRONT)?;
    std::fs::write(dir.path().join("helper.py"), helper)?;
    let mut system = System::start().await?;
    system.registry("registry").await?;
    system.router(&[]).await?;
    for (name, version) in [("front", "1"), ("helper", "2")] {
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, spec(name, version))?;
        system.spec_worker(name, &path, &[]).await?;
    }
    system
        .lookup_until(&wants(&[]), Duration::from_secs(10), |answer| {
            let versioned = |agent: &str| {
                (answer.candidates.iter()).any(|c| c.agent == agent && !c.versions.is_empty())
            };
            versioned("front") && versioned("helper")
        })
        .await?;

    // Turn 1: front hands it to helper, which asks; the next message answers.
    let (code, asked) = send(&system, "Book a table.", Some("front"))?;
    assert_eq!(code, Some(3), "it waits for the user's answer: {asked}");
    assert!(asked.contains("waiting: How many people?"), "{asked}");
    let first = session_in(&asked)?.to_owned();
    let (code, booked) = send(&system, "For two.", None)?;
    assert_eq!(code, Some(0), "{booked}");
    assert!(
        booked.contains("answer: Booked a table for two."),
        "{booked}"
    );
    assert_eq!(session_in(&booked)?, first, "the answer is no new turn");
    // Turn 2 goes to the holder, helper, and its answer is long.
    let (code, listed) = send(&system, "What is on the menu?", None)?;
    assert_eq!(code, Some(0), "{listed}");
    let second = session_in(&listed)?.to_owned();
    assert_ne!(first, second);

    // `baton conversations show`: the message, the question and its
    // answer, then the answer with who gave it, turn by turn.
    let shown = system.baton_stdout(&["conversations", "show", ID])?;
    let menu_indented = MENU.join("\n      ");
    let expected = format!(
        "conversation {ID}
  helper holds the conversation
  turns:   2
  pinned:  front@1, helper@2
  turn 1  session {first}  front@1 -> helper@2  completed
    message: Book a table.
    helper@2 asked: How many people?
    answered: For two.
    answer (helper@2): Booked a table for two.
  turn 2  session {second}  helper@2  completed
    message: What is on the menu?
    answer (helper@2): {menu_indented}
"
    );
    assert_eq!(shown, expected);
    assert!(!shown.contains("completed: "), "{shown}");
    let json: serde_json::Value =
        serde_json::from_str(&system.baton_stdout(&["conversations", "show", ID, "--json"])?)?;
    let turns = json["turns_listed"].as_array().cloned().unwrap_or_default();
    assert_eq!(turns.len(), 2, "{json}");
    assert_eq!(turns[0]["text"], "Book a table.", "{json}");
    assert_eq!(turns[0]["answer"], "Booked a table for two.", "{json}");
    assert_eq!(turns[0]["answered_by"], "helper@2", "{json}");
    assert_eq!(
        turns[0]["path"],
        serde_json::json!(["front@1", "helper@2"]),
        "{json}"
    );
    assert_eq!(
        turns[0]["asked"],
        serde_json::json!([{"by": "helper@2", "question": "How many people?", "answer": "For two."}]),
        "{json}"
    );
    assert_eq!(turns[1]["answer"], menu.as_str(), "{json}");
    assert_eq!(turns[1]["asked"], serde_json::json!([]), "{json}");
    assert_eq!(
        json["versions"],
        serde_json::json!({"front": "1", "helper": "2"})
    );

    // The page over plain HTTP: the turns in order, as they were said.
    let url = console(&mut system, "console", &[]).await?;
    let (status, page) = get(&url, &format!("/conversations/{ID}")).await?;
    assert_eq!(status, 200, "{page}");
    let talk = between(&page, "<ol id=\"talk\">", "</ol>");
    assert_eq!(talk.matches("<li class=\"turn\"").count(), 2, "{talk}");
    let said = [
        "Book a table.",
        "helper@2 asked",
        "How many people?",
        "user answered",
        "For two.",
        "Booked a table for two.",
        "What is on the menu?",
        "Tonight's menu:",
        "Book by eight.",
    ];
    let at: Vec<Option<usize>> = said.iter().map(|text| talk.find(text)).collect();
    assert!(
        at.iter().all(Option::is_some),
        "{said:?} at {at:?} in {talk}"
    );
    assert!(at.is_sorted(), "{said:?} out of order ({at:?}) in {talk}");
    assert_eq!(
        talk.matches("<span class=\"who by\">helper@2</span>")
            .count(),
        2,
        "{talk}"
    );
    assert_eq!(
        talk.matches("<details class=\"fold\">").count(),
        1,
        "{talk}"
    );
    assert!(talk.contains("front@1 → helper@2"), "{talk}");
    let pins = between(&page, "<p id=\"pins\">", "</p>");
    assert!(
        pins.contains("<code class=\"pin\">front@1</code>, <code class=\"pin\">helper@2</code>"),
        "{pins}"
    );

    // In the browser: what a person sees, and the long answer opens.
    let seen = browser(&["talk", &url, ID])?;
    let turns = seen["turns"].as_array().cloned().unwrap_or_default();
    assert_eq!(turns.len(), 2, "{seen}");
    assert_eq!(
        turns[0],
        serde_json::json!({
            "turn": "1",
            "message": "Book a table.",
            "asked": [["helper@2 asked", "How many people?"]],
            "replies": [["user answered", "For two."]],
            "by": "helper@2",
            "answer": "Booked a table for two.",
            "path": "front@1 → helper@2",
            "session": format!("/sessions/{first}"),
            "folded": false,
        }),
        "{seen}"
    );
    assert_eq!(
        turns[1],
        serde_json::json!({
            "turn": "2",
            "message": "What is on the menu?",
            "asked": [],
            "replies": [],
            "by": "helper@2",
            "answer": menu,
            "path": "helper@2",
            "session": format!("/sessions/{second}"),
            "folded": true,
        }),
        "{seen}"
    );
    assert_eq!(
        seen["pins"],
        serde_json::json!(["front@1", "helper@2"]),
        "{seen}"
    );
    let long = &seen["long"];
    assert_eq!(long["shown"], MENU[..3].join("\n"), "{seen}");
    assert_eq!(long["more"], "… show all 10 lines", "{seen}");
    assert_eq!(long["open_before"], false, "{seen}");
    assert_eq!(long["rest_visible_before"], false, "{seen}");
    assert_eq!(long["open_after"], true, "{seen}");
    assert_eq!(long["rest_visible_after"], true, "{seen}");
    assert_eq!(long["more_visible_after"], false, "{seen}");
    assert_eq!(long["rest"], MENU[3..].join("\n"), "{seen}");
    assert_eq!(seen["landed"], first.as_str(), "{seen}");
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_llm_agents_question_reads_with_the_users_answer_in_show_and_on_the_page()
-> anyhow::Result<()> {
    use crate::conversation::conversations::{Desk, desk_with};
    use baton_testkit::{FakeLlm, Scripted};
    // Triage asks through `ask_user`; the next message is its call's result.
    let triage = FakeLlm::start(vec![
        Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]),
        Scripted::text("Refunding ABC-123."),
    ])?;
    let refunds = FakeLlm::start(vec![])?;
    let (mut system, _url, _dir) = desk_with(&triage, &refunds, Desk::default(), &[]).await?;
    let id = "llm-ask";
    let asked = ["send", "--conversation", id, "--wait", "I want a refund."];
    let output = tokio::task::block_in_place(|| system.baton(&asked).output())?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(3), "{stdout}");
    let session = session_in(&stdout)?.to_owned();
    let answered = ["send", "--conversation", id, "--wait", "ABC-123"];
    let answered = system.baton_stdout(&answered)?;
    assert!(
        answered.contains("answer: Refunding ABC-123."),
        "{answered}"
    );
    // Triage's version, as its worker names it (a digest of its spec).
    let events = system.stored_events(session.parse()?).await?;
    let version = (events.iter())
        .find(|event| event.agent.as_deref() == Some("triage"))
        .and_then(|event| event.version.clone())
        .ok_or_else(|| anyhow::anyhow!("triage names no version: {events:?}"))?;
    let by = format!("triage@{version}");

    let shown = system.baton_stdout(&["conversations", "show", id])?;
    let said: Vec<&str> = shown
        .lines()
        .skip_while(|line| !line.starts_with("  turn 1  "))
        .collect();
    assert_eq!(
        said,
        [
            format!("  turn 1  session {session}  {by}  completed").as_str(),
            "    message: I want a refund.",
            format!("    {by} asked: Which order?").as_str(),
            "    answered: ABC-123",
            format!("    answer ({by}): Refunding ABC-123.").as_str(),
        ],
        "{shown}"
    );

    let url = console(&mut system, "console", &[]).await?;
    let (status, page) = get(&url, &format!("/conversations/{id}")).await?;
    assert_eq!(status, 200, "{page}");
    let talk = between(&page, "<ol id=\"talk\">", "</ol>");
    let order = [
        "I want a refund.",
        &format!("{by} asked"),
        "Which order?",
        "user answered",
        "ABC-123",
        "Refunding ABC-123.",
    ];
    let at: Vec<Option<usize>> = order.iter().map(|text| talk.find(*text)).collect();
    assert!(
        at.iter().all(Option::is_some),
        "{order:?} at {at:?} in {talk}"
    );
    assert!(at.is_sorted(), "{order:?} out of order ({at:?}) in {talk}");
    Ok(())
}

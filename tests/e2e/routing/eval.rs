//! `baton eval`: a version tried on recorded sessions. The session starts
//! at `front`, an LLM agent that hands every task to `support`; `support`
//! is an LLM agent with the ledger's MCP tools (`scripts/ledger.py`, the
//! official Python SDK) in two versions, each with its own stand-in model.
//! Task `n`'s ground truth, by `n % 10`:
//!
//! | n % 10 | version 1 (recorded)            | version 2 (evaluated)                 |
//! |--------|---------------------------------|---------------------------------------|
//! | 0      | `set_limit(A-n, n)`, "answer n" | the same call (reused), "answer n"    |
//! | 1      | `balance(A-n)`, "answer n"      | `transfer(A-n, n)`: `would_write`     |
//! | 2      | `balance(A-n)`, "answer n"      | `balance(B-n)` (read-only: called), "other n" |
//! | 3      | `balance(A-n)`, "answer n"      | `balance(A-n)` (reused), "other n"    |
//! | else   | `balance(A-n)`, "answer n"      | the same, "answer n"                  |
//!
//! So 30 of 100 sessions answer differently, 10 of them stopped before a
//! write, and no write is made.

use std::collections::HashMap;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};
use baton_testkit::{FakeLlm, Scripted};
use serde_json::{Value as Json, json};
use uuid::Uuid;

use super::gates::Ledger;
use crate::util::System;

/// The task number a request is about (`task N` in its messages).
fn task_number(body: &Json) -> u64 {
    let asked = body["messages"].to_string();
    (asked.split("task ").nth(1))
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse().ok())
        .unwrap_or(999)
}

/// `support`'s model at `version` (1 or 2), as the table above says.
fn support_model(version: u8) -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::responding(move |body: &Json| {
        let n = task_number(body);
        // A ledger call's result (not `front`'s handoff) came back.
        let answered = (body["messages"].as_array().into_iter().flatten()).any(|message| {
            message["role"] == "tool"
                && !(message["content"].as_str())
                    .is_some_and(|text| text.starts_with("transferred"))
        });
        if answered {
            let other = version == 2 && matches!(n % 10, 2 | 3);
            let word = if other { "other" } else { "answer" };
            return Scripted::text(&format!("{word} {n}"));
        }
        let account = format!("A-{n}");
        let (tool, args) = match (version, n % 10) {
            (_, 0) => ("set_limit", json!({"account": account, "limit": n})),
            (2, 1) => ("transfer", json!({"account": account, "amount": n})),
            (2, 2) => ("balance", json!({"account": format!("B-{n}")})),
            _ => ("balance", json!({"account": account})),
        };
        Scripted::tool_calls(&[(tool, &args.to_string())])
    })?)
}

/// An agent type's spec: an LLM agent on `llm`, with `more` after it.
fn spec(name: &str, version: &str, llm: &FakeLlm, more: &str) -> String {
    format!(
        "name = \"{name}\"\nkind = \"llm\"\nversion = \"{version}\"\ntimeout_ms = 30000\n\n[llm]\nbase_url = \"{}\"\nmodel = \"m\"\nsystem_prompt = \"Help.\"\n{more}",
        llm.url()
    )
}

/// The judge's model: "same" when both answers are equal, else "worse".
fn judge_model() -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::responding(|body: &Json| {
        let asked = body["messages"].to_string();
        let answer = |label: &str| {
            (asked.split(label).nth(1))
                .and_then(|rest| rest.split("\\n").nth(1))
                .unwrap_or_default()
                .to_owned()
        };
        let (a, b) = (answer("Answer A"), answer("Answer B"));
        Scripted::text(if a == b { "same" } else { "worse" })
    })?)
}

/// What `baton eval ARGS --json` printed: the summary, and one object per
/// session.
fn eval_json(system: &System, args: &[&str]) -> anyhow::Result<(Json, Vec<Json>)> {
    let args: Vec<&str> = ["eval"]
        .iter()
        .chain(args)
        .chain(&["--json"])
        .copied()
        .collect();
    let shown = system.baton_stdout(&args)?;
    let mut lines: Vec<Json> = shown
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let summary = lines.pop().ok_or_else(|| anyhow::anyhow!("no output"))?;
    Ok((summary, lines))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_tried_on_100_recorded_sessions_differs_on_exactly_30_and_writes_nothing()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (v1, v2, judge_llm) = (support_model(1)?, support_model(2)?, judge_model()?);
    let front_llm = FakeLlm::responding(|_| {
        Scripted::tool_calls(&[("transfer_to_support", r#"{"reason": "support knows"}"#)])
    })?;
    let mut system = System::start().await?;
    let ledger = Ledger::start(&mut system, dir.path(), false, 0.0).await?;
    let tools = format!(
        "\n[[mcp]]\nurl = \"{}\"\ntimeout_ms = 30000\n",
        ledger.url()
    );
    let handoff = "\n[[handoffs]]\nto = \"support\"\ndescription = \"Support\"\n";
    let specs = [
        ("front", spec("front", "1", &front_llm, handoff)),
        ("support-v1", spec("support", "1", &v1, &tools)),
        ("support-v2", spec("support", "2", &v2, &tools)),
        ("judge", spec("judge", "1", &judge_llm, "")),
    ];
    for (label, text) in &specs {
        let path = dir.path().join(format!("{label}.toml"));
        std::fs::write(&path, text)?;
        let path = path.to_string_lossy().into_owned();
        let args = ["worker", "--spec", path.as_str(), "--no-registry"];
        system.spawn(label, &args, "worker started").await?;
    }
    // 100 recorded sessions, on version 1.
    let front = AgentName::new("front")?;
    let mut number = HashMap::new();
    for n in 0..100_u64 {
        let mut task = Envelope::task(format!("task {n}"));
        task.replayable = true;
        system.client.submit_to(&front, &task).await?;
        number.insert(task.session, n);
    }
    let sessions: Vec<Uuid> = number.keys().copied().collect();
    for (session, events) in system
        .ended_sessions(sessions, Duration::from_secs(120))
        .await?
    {
        let end = events.last().map(|event| event.kind.clone());
        assert_eq!(
            end,
            Some(EventType::Completed),
            "session {session}: {events:?}"
        );
    }
    let writes = |ledger: &Ledger| (ledger.effects("set_limit"), ledger.effects("transfer"));
    assert_eq!(writes(&ledger), (10, 0));
    assert_eq!(ledger.effects("balance"), 90);
    assert_eq!((front_llm.requests().len(), v2.requests().len()), (100, 0));
    let rollout_before = system.baton_stdout(&["rollout", "support"])?;

    let (summary, trials) = eval_json(
        &system,
        &[
            "support",
            "--version",
            "2",
            "--sessions",
            "100",
            "--parallel",
            "8",
        ],
    )?;
    assert_eq!(trials.len(), 100);
    let mut different = Vec::new();
    let mut would_write = Vec::new();
    for trial in &trials {
        let session: Uuid = trial["session"].as_str().unwrap_or_default().parse()?;
        let n = number[&session];
        let same = trial["same_answer"].as_bool();
        assert_eq!(same, Some(!matches!(n % 10, 1..=3)), "task {n}: {trial}");
        assert_eq!(trial["base"]["version"], "1", "{trial}");
        assert_eq!(trial["trial"]["version"], "2", "{trial}");
        if same == Some(false) {
            different.push(n);
        }
        if let Some(call) = trial["would_write"].as_str() {
            assert!(
                call.contains("transfer") && call.contains(&format!("\"A-{n}\"")),
                "{call}"
            );
            assert_eq!(trial["trial"]["reason"], "would_write", "{trial}");
            would_write.push(n);
        } else {
            assert_eq!(trial["trial"]["outcome"], "completed", "{trial}");
        }
    }
    assert_eq!(different.len(), 30);
    would_write.sort_unstable();
    assert_eq!(would_write, (0..10).map(|k| 10 * k + 1).collect::<Vec<_>>());
    let summary = &summary["summary"];
    assert_eq!(
        (
            &summary["sessions"],
            &summary["same"],
            &summary["different"],
            &summary["would_write"]
        ),
        (&json!(100), &json!(70), &json!(30), &json!(10)),
        "{summary}"
    );
    assert_eq!(summary["base"]["succeeded"], 100, "{summary}");
    assert_eq!(summary["trial"]["succeeded"], 90, "{summary}");
    // No write was made; only the 10 read-only calls with new arguments.
    assert_eq!(writes(&ledger), (10, 0));
    assert_eq!(ledger.effects("balance"), 100);
    let accounts: Vec<Json> = ledger
        .lines("balance")
        .iter()
        .map(|line| line["args"]["account"].clone())
        .collect();
    assert_eq!(
        accounts
            .iter()
            .filter(|a| a.as_str().is_some_and(|a| a.starts_with("B-")))
            .count(),
        10
    );
    // The hops before `support` reused their records; version 2 answered
    // every session once more after its tool call, but those that stopped.
    assert_eq!(front_llm.requests().len(), 100);
    assert_eq!(v2.requests().len(), 100 + 90);
    // Not live: nothing dead-lettered, the rollout unchanged, and each
    // evaluation says what it is.
    assert_eq!(system.client.dead_letters().await?.len(), 0);
    let first = &trials[0];
    let replay = first["replay"].as_str().unwrap_or_default();
    let watched = system.baton_stdout(&["watch", replay])?;
    let recorded = first["session"].as_str().unwrap_or_default();
    assert!(
        watched.contains(&format!(
            "front took the task (an evaluation of {recorded})"
        )),
        "{watched}"
    );
    // Every event of an evaluation says what it replays: one that called
    // a read-only tool again has that call's event too.
    let session_of = |trial: &Json| {
        trial["session"]
            .as_str()
            .and_then(|s| s.parse::<Uuid>().ok())
    };
    let called = (trials.iter())
        .find(|trial| session_of(trial).is_some_and(|session| number[&session] % 10 == 2))
        .ok_or_else(|| anyhow::anyhow!("no task n % 10 == 2"))?;
    let recorded = session_of(called);
    let replay: Uuid = called["replay"].as_str().unwrap_or_default().parse()?;
    let events = system.client.history(replay).await?;
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    assert!(kinds.contains(&"tool_called"), "{kinds:?}");
    assert!(
        events.iter().all(|event| event.replay_of == recorded),
        "{kinds:?}"
    );
    assert_eq!(
        system.baton_stdout(&["rollout", "support"])?,
        rollout_before
    );

    // A judge says, session by session, what the ground truth says.
    let (summary, trials) = eval_json(
        &system,
        &[
            "support",
            "--version",
            "2",
            "--sessions",
            "20",
            "--judge",
            "judge",
        ],
    )?;
    assert_eq!(trials.len(), 20);
    for trial in trials {
        let session: Uuid = trial["session"].as_str().unwrap_or_default().parse()?;
        let n = number[&session];
        let expected = if matches!(n % 10, 1..=3) {
            "worse"
        } else {
            "same"
        };
        assert_eq!(trial["verdict"], expected, "task {n}: {trial}");
    }
    let verdicts = summary["summary"]["verdicts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        verdicts.iter().filter_map(Json::as_u64).sum::<u64>(),
        20,
        "{summary}"
    );
    assert_eq!(writes(&ledger), (10, 0));

    // The text form says the same in words.
    let text = system.baton_stdout(&[
        "eval",
        "support",
        "--version",
        "2",
        "--sessions",
        "100",
        "--since",
        "1h",
    ])?;
    assert!(
        text.contains("100 sessions: 70 same, 30 different (10 would_write, 0 unfinished)"),
        "{text}"
    );
    assert!(text.contains("success: recorded 100.0%"), "{text}");

    // Bad input: each refused, naming the fix.
    let refused = |args: &[&str]| -> anyhow::Result<String> {
        let output = system.baton(args).output()?;
        anyhow::ensure!(!output.status.success(), "baton {args:?} succeeded");
        Ok(String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let never_ran = refused(&["eval", "support", "--version", "9"])?;
    assert!(
        never_ran.contains("no worker of version 9 of agent type support has run"),
        "{never_ran}"
    );
    let since = refused(&["eval", "support", "--version", "2", "--since", "1x"])?;
    assert!(
        since.contains("--since \"1x\" is not a duration"),
        "{since}"
    );
    let nothing = refused(&["eval", "judge", "--version", "1", "--conversations"])?;
    assert!(
        nothing.contains("no finished conversation turn that reached judge is recorded"),
        "{nothing}"
    );
    let no_judge = refused(&["eval", "support", "--version", "2", "--judge", "nobody"])?;
    assert!(no_judge.contains("nobody"), "{no_judge}");
    assert_eq!(writes(&ledger), (10, 0));
    Ok(())
}

/// `helper`'s model at `version`: it repeats the user's last message,
/// except that version 2 answers a question about plans otherwise, asks
/// the user back when thanked, and hands a question about the best plan
/// to a person.
fn echo_model(version: u8) -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::responding(move |body: &Json| {
        let last = (body["messages"].as_array().into_iter().flatten())
            .rfind(|message| message["role"] == "user")
            .and_then(|message| message["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        match version {
            2 if last.contains("best") => {
                Scripted::tool_calls(&[("transfer_to_person", r#"{"reason": "a person knows"}"#)])
            }
            2 if last.contains("plan") => Scripted::text("You are on plan B."),
            2 if last.contains("Thanks") => {
                Scripted::tool_calls(&[("ask_user", r#"{"question": "Anything else?"}"#)])
            }
            _ => Scripted::text(&format!("You said: {last}")),
        }
    })?)
}

#[tokio::test(flavor = "multi_thread")]
async fn conversation_turns_are_tried_turn_by_turn_and_the_conversation_is_left_alone()
-> anyhow::Result<()> {
    let (v1, v2) = (echo_model(1)?, echo_model(2)?);
    let dir = tempfile::tempdir()?;
    let mut system = System::start().await?;
    system.router(&[]).await?;
    let person = "\n[[handoffs]]\nto = \"person\"\ndescription = \"A person\"\n";
    let mut specs: Vec<(String, String)> = [("1", &v1), ("2", &v2)]
        .iter()
        .map(|(version, llm)| (format!("v{version}"), spec("helper", version, llm, person)))
        .collect();
    specs.push((
        "person".to_owned(),
        "name = \"person\"\nkind = \"human\"\n".to_owned(),
    ));
    for (label, text) in &specs {
        let path = dir.path().join(format!("{label}.toml"));
        std::fs::write(&path, text)?;
        let path = path.to_string_lossy().into_owned();
        let args = ["worker", "--spec", path.as_str(), "--no-registry"];
        system.spawn(label, &args, "worker started").await?;
    }
    let turns = ["Hello", "Which plan am I on?", "Thanks"];
    for text in turns {
        system.baton_stdout(&[
            "send",
            "--conversation",
            "c1",
            "--to",
            "helper",
            "--wait",
            text,
        ])?;
    }
    // A session that is not a turn is not tried with --conversations.
    system.baton_stdout(&["send", "--to", "helper", "--wait", "What plan is best?"])?;
    let shown_before = system.baton_stdout(&["conversations", "show", "c1"])?;
    assert_eq!(v2.requests().len(), 0);

    let (summary, trials) = eval_json(
        &system,
        &[
            "helper",
            "--version",
            "2",
            "--conversations",
            "--sessions",
            "10",
        ],
    )?;
    let said: Vec<(String, bool)> = (trials.iter())
        .map(|trial| {
            let base = trial["base"]["answer"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (base, trial["same_answer"] == true)
        })
        .collect();
    // Newest first: each turn, its answer as recorded, and whether v2's is the same.
    assert_eq!(
        said,
        [
            ("You said: Thanks".to_owned(), false),
            ("You said: Which plan am I on?".to_owned(), false),
            ("You said: Hello".to_owned(), true),
        ],
        "{trials:?}"
    );
    assert_eq!(trials[1]["trial"]["answer"], "You are on plan B.");
    // Asking the user back ends the evaluation: no person is asked.
    assert_eq!(trials[0]["trial"]["outcome"], "failed", "{trials:?}");
    assert_eq!(trials[0]["trial"]["reason"], "input_required", "{trials:?}");
    assert_eq!(summary["summary"]["different"], 2, "{summary}");
    assert_eq!(v2.requests().len(), 3);
    // The conversation has its three turns, as before.
    assert_eq!(
        system.baton_stdout(&["conversations", "show", "c1"])?,
        shown_before
    );

    // Without --conversations: only the session that was not a turn. Its
    // evaluation hands it to a person, whose agent ends it instead of
    // waiting: the inbox stays empty.
    let (_, sessions) = eval_json(&system, &["helper", "--version", "2"])?;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0]["same_answer"], false, "{sessions:?}");
    assert_eq!(
        sessions[0]["trial"]["reason"], "input_required",
        "{sessions:?}"
    );
    let detail = sessions[0]["trial"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("an evaluation asks no person"),
        "{sessions:?}"
    );
    let inbox = system.baton_stdout(&["inbox", "ls", "--json"])?;
    assert_eq!(inbox.trim(), "", "{inbox}");
    Ok(())
}

//! Who a conversation's next turn goes to: by default the agent that
//! answered; the entry again when the entry's spec says
//! `next_turn = "entry"`, or when the agent that answered handed the
//! conversation back (`hand_back`). Driven by the official A2A client; the
//! scripted model stand-ins count which agent's model each turn reached.

use std::time::Duration;

use baton_proto::{Conversation, DeadlineTimer, Envelope, Wire, derive_id};
use baton_testkit::{FakeLlm, Scripted};
use futures::StreamExt;

use crate::conversation::conversations::{Desk, answer, asked, desk_with};
use crate::gateways::a2a::client;

/// Sends `texts` as turns of one new conversation; their answers.
fn turns(url: &str, texts: &[&str]) -> anyhow::Result<Vec<String>> {
    let context = uuid::Uuid::new_v4().to_string();
    let mut answers = Vec::new();
    for text in texts {
        let turn = client(url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
        answers.push(answer(&turn).to_owned());
    }
    Ok(answers)
}

#[tokio::test(flavor = "multi_thread")]
async fn next_turn_entry_starts_every_turn_at_the_entry() -> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer_to_refunds", r#"{"reason": "refund"}"#)]),
        Scripted::text("Anything else I can do?"),
    ])?;
    let refunds = FakeLlm::start(vec![Scripted::text("Refunded ABC-123.")])?;
    let more = Desk {
        triage: "next_turn = \"entry\"",
        ..Desk::default()
    };
    let (_system, url, _dir) = desk_with(&triage, &refunds, more, &[]).await?;
    let answers = turns(&url, &["Refund ABC-123, please.", "Thanks."])?;
    assert_eq!(answers, ["Refunded ABC-123.", "Anything else I can do?"]);
    // Turn 2 went to triage again, not to refunds, which answered turn 1.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (2, 1));
    // And triage saw turn 1 and its answer.
    let second = asked(&triage, 1);
    assert!(
        second.iter().any(|m| m == "user: Refund ABC-123, please.")
            && second.iter().any(|m| m == "assistant: Refunded ABC-123.")
            && second.last().map(String::as_str) == Some("user: Thanks."),
        "{second:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_hands_back_sends_the_next_turn_to_the_entry() -> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![
        Scripted::tool_calls(&[("transfer_to_refunds", r#"{"reason": "refund"}"#)]),
        Scripted::text("Anything else I can do?"),
    ])?;
    let refunds = FakeLlm::start(vec![
        Scripted::text("Who are you?"),
        Scripted::tool_calls(&[("hand_back", r#"{"answer": "Refund done, Ada."}"#)]),
    ])?;
    let more = Desk {
        refunds_llm: "hand_back = true\n",
        ..Desk::default()
    };
    let (_system, url, _dir) = desk_with(&triage, &refunds, more, &[]).await?;
    let answers = turns(&url, &["Refund ABC-123, please.", "I am Ada.", "Thanks."])?;
    assert_eq!(
        answers,
        [
            "Who are you?",
            "Refund done, Ada.",
            "Anything else I can do?"
        ]
    );
    // Turn 2 stayed with refunds (it held the conversation); it handed the
    // conversation back, so turn 3 went to triage.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (2, 2));
    let first = refunds.requests();
    let offered: Vec<&str> = first[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(offered.contains(&"hand_back"), "{offered:?}");
    let third = asked(&triage, 1);
    assert!(
        third.iter().any(|m| m == "assistant: Refund done, Ada.")
            && third.last().map(String::as_str) == Some("user: Thanks."),
        "{third:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_continues_and_reads_only_the_conversations_it_started() -> anyhow::Result<()> {
    callers_on("callers").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_is_held_to_its_own_conversations_over_http_json_too() -> anyhow::Result<()> {
    callers_on("rest:callers").await
}

/// Two callers and an anonymous one, through the a2a-sdk client `step`
/// (`callers`: JSON-RPC, `rest:callers`: HTTP+JSON).
async fn callers_on(step: &str) -> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![
        Scripted::text("Which order?"),
        Scripted::text("ABC-123 ships today."),
    ])?;
    let refunds = FakeLlm::start(vec![])?;
    let dir = tempfile::tempdir()?;
    let (web, app) = ("web-0123456789abcdef", "app-fedcba9876543210");
    let callers = dir.path().join("callers");
    std::fs::write(&callers, format!("# who calls\nweb {web}\napp {app}\n"))?;
    let file = callers.to_string_lossy().to_string();
    let flags = ["--callers", file.as_str()];
    let (system, url, _specs) = desk_with(&triage, &refunds, Desk::default(), &flags).await?;
    // On NATS, only the roles that serve conversations reach their bucket.
    for role in [&["client"][..], &["worker", "triage"][..]] {
        let mut args = vec!["permissions"];
        args.extend_from_slice(role);
        let block = system.baton_stdout(&args)?;
        assert!(!block.contains("CONVERSATIONS"), "{role:?}: {block}");
    }
    for role in ["operator", "router"] {
        let block = system.baton_stdout(&["permissions", role])?;
        assert!(block.contains("BATON_CONVERSATIONS"), "{role}: {block}");
    }
    let context = uuid::Uuid::new_v4().to_string();
    let seen = client(
        &url,
        step,
        &[&context, web, app, "Where is my order?", "ABC-123."],
    )?;
    assert_eq!(answer(&seen["started"]), "Which order?", "{seen}");
    // Another caller can neither continue the conversation nor answer,
    // read or cancel its task, nor list it.
    let said = seen["said"]["message"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!("conversation {context} belongs to another caller")),
        "{seen}"
    );
    for refused in ["answered", "got", "cancelled"] {
        assert_eq!(
            seen[refused]["error"], "TaskNotFoundError",
            "{refused}: {seen}"
        );
    }
    assert_eq!(seen["listed"], 0, "{seen}");
    // A call without a token is refused before anything is read.
    assert!(
        seen["anonymous"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("401")),
        "{seen}"
    );
    // Its owner lists and continues it, and the refused messages reached no
    // model: triage was asked twice, by the owner's two turns.
    assert_eq!(seen["own"], 1, "{seen}");
    assert_eq!(answer(&seen["next"]), "ABC-123 ships today.", "{seen}");
    assert_eq!(triage.requests().len(), 2);
    let second = asked(&triage, 1);
    assert!(
        !second
            .iter()
            .any(|m| m.contains("Me too") || m.contains("Yes.")),
        "{second:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_turns_tool_calls_reach_the_next_turn_each_with_a_result()
-> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    // The ledger's transfer takes effect, then stalls: the interrupt comes
    // while the call has no result.
    let (ledger, _ledger) = crate::routing::gates::Ledger::alone(dir.path(), false, 0.0).await?;
    ledger.stall("stall-after", "transfer")?;
    let triage = FakeLlm::start(vec![
        Scripted::tool_calls(&[
            ("balance", r#"{"account": "A"}"#),
            ("transfer", r#"{"account": "A", "amount": 5}"#),
        ]),
        Scripted::text("Both answered."),
    ])?;
    let refunds = FakeLlm::start(vec![])?;
    let mcp = format!("\n[[mcp]]\nurl = \"{}\"\n", ledger.url());
    let more = Desk {
        triage: &mcp,
        ..Desk::default()
    };
    let (_system, url, _specs) = desk_with(&triage, &refunds, more, &[]).await?;
    let context = uuid::Uuid::new_v4().to_string();
    let meta = r#"{"overlap": "interrupt"}"#;
    let both = client(
        &url,
        "double",
        &[&context, "Move 5 from A.", "Make it 7.", "2.0", meta],
    )?;
    assert_eq!(both["first"]["state"], "TASK_STATE_CANCELED", "{both}");
    assert_eq!(answer(&both["second"]), "Both answered.", "{both}");
    assert_eq!(
        ledger.effects("transfer"),
        1,
        "the cut call is not made again"
    );
    // The new turn's model saw both messages and what the first turn did:
    // each tool call with a result, the cut one's saying so.
    assert_eq!(triage.requests().len(), 2);
    let second = triage.requests()[1].body["messages"].clone();
    let turns: Vec<(String, String)> = second
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            let said = match m["tool_calls"].as_array() {
                Some(calls) => calls
                    .iter()
                    .map(|c| c["function"]["name"].as_str().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(","),
                None => m["content"].as_str().unwrap_or_default().to_owned(),
            };
            (m["role"].as_str().unwrap_or_default().to_owned(), said)
        })
        .collect();
    let roles: Vec<&str> = turns.iter().map(|(role, _)| role.as_str()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool", "user"],
        "{turns:#?}"
    );
    assert_eq!(turns[0].1, "Move 5 from A.");
    assert_eq!(turns[1].1, "balance,transfer");
    assert!(turns[2].1.starts_with("balance done"), "{turns:#?}");
    assert!(
        turns[3]
            .1
            .starts_with("interrupted: the turn was cancelled"),
        "{turns:#?}"
    );
    assert_eq!(turns[4].1, "Make it 7.");
    // Every call has its result, matched by id.
    let ids = |key: &str| -> Vec<String> {
        second
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| match key {
                "calls" => m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["id"].as_str().map(str::to_owned))
                    .collect::<Vec<_>>(),
                _ => m["tool_call_id"]
                    .as_str()
                    .map(str::to_owned)
                    .into_iter()
                    .collect(),
            })
            .collect()
    };
    assert_eq!(ids("calls"), ids("results"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_holders_turn_goes_past_the_router_as_the_router_would_send_it() -> anyhow::Result<()> {
    let triage = crate::conversation::conversations::transferring()?;
    let refunds = FakeLlm::start(vec![
        Scripted::text("Who are you?"),
        Scripted::text("Refund done, Ada."),
    ])?;
    let more = Desk {
        router: &[
            "--default-deadline-ms",
            "600000",
            "--default-budget-tokens",
            "90000",
        ],
        ..Desk::default()
    };
    let (mut system, url, _dir) = desk_with(&triage, &refunds, more, &[]).await?;
    // Every task and deadline timer published from now on.
    let mut published = system.nats.subscribe("baton.>").await?;
    system.nats.flush().await?;
    let context = uuid::Uuid::new_v4().to_string();
    for text in ["Refund ABC-123, please.", "I am Ada."] {
        let turn = client(&url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
    }
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 2));
    let (mut tasks, mut timers) = (Vec::new(), Vec::new());
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), published.next()).await
    {
        let subject = message.subject.to_string();
        if subject == "baton.agent._deadline" {
            timers.push(DeadlineTimer::from_msgpack(&message.payload)?.session);
        } else if subject == "baton.ingress" || subject.starts_with("baton.agent.") {
            let task = Envelope::from_msgpack(&message.payload)?;
            if let Some(turn) = task.conversation.as_ref().map(|of| of.turn) {
                tasks.push((subject, turn, task));
            }
        }
    }
    let sent = |turn: u32| -> Vec<&(String, u32, Envelope)> {
        tasks.iter().filter(|(_, t, _)| *t == turn).collect()
    };
    // Turn 1 went to the router, which sent it to the entry, which handed
    // it to refunds.
    let first: Vec<&str> = sent(1).iter().map(|(s, _, _)| s.as_str()).collect();
    assert_eq!(
        first,
        ["baton.ingress", "baton.agent.triage", "baton.agent.refunds"],
        "{tasks:#?}"
    );
    // Turn 2 went straight to the holder, once, in the form the router
    // would have sent it: the id it derives, its default deadline and budget.
    let second = sent(2);
    let logs = format!(
        "{}\n{}",
        system.process("a2a").stderr(),
        system.process("router").stderr()
    );
    assert_eq!(second.len(), 1, "{tasks:#?}\n{logs}");
    let (subject, _, task) = second[0];
    assert_eq!(subject, "baton.agent.refunds");
    assert_eq!(task.to.as_deref(), Some("refunds"));
    let record = async_nats::jetstream::new(system.nats.clone())
        .get_key_value("BATON_CONVERSATIONS")
        .await?
        .get(Conversation::key_of(&context))
        .await?
        .expect("the conversation's record");
    let record: Conversation = rmp_serde::from_slice(&record)?;
    assert_eq!(task.id, derive_id(record.task_id(2), 0));
    assert_eq!(task.budget.and_then(|b| b.tokens), Some(90_000));
    let ahead = task
        .deadline
        .unwrap_or_default()
        .saturating_sub(task.created_at);
    assert!(
        (600_000..=601_000).contains(&ahead),
        "deadline {ahead} ms ahead"
    );
    // And its deadline is watched, as each turn's.
    let (one, two) = (sent(1)[0].2.session, task.session);
    assert_eq!(
        (
            timers.iter().filter(|s| **s == one).count(),
            timers.iter().filter(|s| **s == two).count()
        ),
        (1, 1),
        "{timers:?}"
    );
    Ok(())
}

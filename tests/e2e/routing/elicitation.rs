//! An MCP server's question during a call reaches a person (`[[mcp]]
//! elicitation = "ask"`, the default): the ledger of `gates` (the official
//! MCP Python SDK) asks the user to confirm each `pay` before it takes
//! effect, and logs each time it asks (as tool `pay?`). The call is
//! cancelled while the question waits, and made again with the answer;
//! the tests count the questions, the effects and the model's requests.

use baton_testkit::Scripted;
use serde_json::{Value as Json, json};

use super::gates::{Teller, call};
use baton_proto::EventType;

/// What `pay` asks, with how to answer it.
const ASKED: &str = "Pay 5 from A? Answer yes or no, or /decline.";

fn paying() -> Vec<Scripted> {
    vec![
        call("pay", &json!({"account": "A", "amount": 5})),
        Scripted::text("Done."),
    ]
}

/// The question waiting for the teller's `pay`, once it waits.
async fn question(t: &Teller) -> anyhow::Result<Json> {
    let found = baton_testkit::eventually(std::time::Duration::from_secs(30), || async {
        let entries = t.inbox()?;
        let waiting: Vec<&Json> = (entries.iter())
            .filter(|e| e["reason"] == "input_required" && e["tool"] == "pay")
            .collect();
        match waiting[..] {
            [one] => Ok(one.clone()),
            _ => Err(anyhow::anyhow!("not one question waiting: {entries:?}")),
        }
    })
    .await?;
    Ok(found)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_servers_question_is_answered_by_the_next_message_of_a_conversation() -> anyhow::Result<()>
{
    let mut t = Teller::start(paying(), false, "").await?;
    t.worker("w1").await?;
    // Conversations are kept by the router.
    let router = ["--default-agent", "teller", "--no-registry"];
    t.system.router(&router).await?;
    let said = "Pay 5 from A.\nmaybe\nyes\n";
    let (ok, stdout, stderr) = crate::conversation::chat::chat(
        &t.system,
        &["--conversation", "pay-chat", "teller"],
        said,
    )?;
    assert!(ok, "{stdout}{stderr}");
    // Asked, asked again after an answer the schema refused, then done.
    let again = format!("That answer could not be used (\"maybe\" is not yes or no). {ASKED}");
    assert_eq!(stdout, format!("{ASKED}\n{again}\nDone.\n"), "{stderr}");
    // The server asked on each of the 3 calls; the payment took effect
    // once, with the schema's default for the field left out.
    assert_eq!(t.ledger.lines("pay?").len(), 3);
    let paid = t.ledger.lines("pay");
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert_eq!(paid[0]["args"]["note"], "none");
    // One turn, two model calls: the call, then the answer with its result.
    assert_eq!(t.asked(), 2);
    assert!(t.last_said(1).starts_with("pay done"), "{}", t.last_said(1));
    assert!(t.inbox()?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_question_waits_in_the_inbox_through_a_kill_and_is_asked_of_a_person_once()
-> anyhow::Result<()> {
    let mut t = Teller::start(paying(), false, "").await?;
    t.worker("w1").await?;
    let task = t.send("Pay 5 from A.").await?;
    let waiting = question(&t).await?;
    let arguments = &waiting["arguments"];
    assert_eq!(arguments["question"], "Pay 5 from A?", "{waiting}");
    assert_eq!(arguments["call"], json!({"account": "A", "amount": 5}));
    assert_eq!(arguments["schema"]["required"], json!(["confirm"]));
    assert_eq!(t.ledger.effects("pay"), 0);
    // The worker dies while the question waits; another takes over.
    t.system.process("w1").kill9();
    t.worker("w2").await?;
    let id = waiting["id"].as_str().unwrap_or_default();
    let answered = t.baton(&["inbox", "reply", id, r#"{"confirm": true, "note": "rent"}"#])?;
    assert!(answered.contains("goes on with the answer"), "{answered}");
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    let paid = t.ledger.lines("pay");
    assert_eq!((paid.len(), &paid[0]["args"]["note"]), (1, &json!("rent")));
    // The server asked twice (the call, then the call made again); the
    // person was asked once: one entry, one wait.
    assert_eq!(t.ledger.lines("pay?").len(), 2);
    let kinds = t.kinds(&task).await?;
    let waits = kinds.iter().filter(|k| **k == EventType::Waiting).count();
    assert_eq!(waits, 1, "{kinds:?}");
    assert_eq!(t.asked(), 2);
    // Both calls carried the same idempotency key.
    let keys: Vec<Json> = (t.ledger.lines("pay?").iter())
        .map(|line| line["key"].clone())
        .collect();
    assert!(keys[0].is_string() && keys[0] == keys[1], "{keys:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declined_question_makes_no_payment_and_the_model_reads_why() -> anyhow::Result<()> {
    let mut t = Teller::start(paying(), false, "").await?;
    t.worker("w1").await?;
    let task = t.send("Pay 5 from A.").await?;
    let waiting = question(&t).await?;
    let id = waiting["id"].as_str().unwrap_or_default();
    t.baton(&["inbox", "reply", id, "/decline"])?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(t.ledger.effects("pay"), 0);
    assert_eq!(t.ledger.lines("pay?").len(), 2);
    assert_eq!(t.last_said(1), "payment not made: the user chose decline");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_asks_again_after_it_acted_is_not_made_twice() -> anyhow::Result<()> {
    let script = vec![
        call("pay_with_receipt", &json!({"account": "A", "amount": 5})),
        Scripted::text("Done."),
    ];
    let mut t = Teller::start(script, false, "").await?;
    t.worker("w1").await?;
    let task = t.send("Pay 5 from A.").await?;
    let first = asking(&t, "Pay 5 from A?").await?;
    t.baton(&["inbox", "reply", &first, "yes"])?;
    // Answered from the journal, the call pays, then asks again.
    let second = asking(&t, "Send a receipt?").await?;
    assert_eq!(t.ledger.effects("pay_with_receipt"), 1);
    t.baton(&["inbox", "reply", &second, "yes"])?;
    // It may have acted before its second question: a person says whether
    // it did before it is made again; it is not made twice.
    let args = json!({"account": "A", "amount": 5});
    let doubt = t
        .entry("tool_outcome_unknown", "pay_with_receipt", &args)
        .await?;
    let id = doubt["id"].as_str().unwrap_or_default();
    t.baton(&[
        "inbox",
        "resolve",
        id,
        "--happened",
        "--result",
        "paid; receipt sent",
    ])?;
    assert_eq!(t.end(&task).await?.kind, EventType::Completed);
    assert_eq!(t.ledger.effects("pay_with_receipt"), 1);
    assert_eq!(t.last_said(1), "paid; receipt sent");
    Ok(())
}

/// The id of the entry that asks `question`, once one does.
async fn asking(t: &Teller, question: &str) -> anyhow::Result<String> {
    let found = baton_testkit::eventually(std::time::Duration::from_secs(30), || async {
        let entries = t.inbox()?;
        (entries.iter())
            .find(|e| e["reason"] == "input_required" && e["arguments"]["question"] == question)
            .and_then(|e| e["id"].as_str().map(str::to_owned))
            .ok_or_else(|| anyhow::anyhow!("no question {question:?}: {entries:?}"))
    })
    .await?;
    Ok(found)
}

//! Conversations through `baton a2a serve`, driven by the official A2A
//! Python SDK's client: a context is a conversation, each message a turn;
//! the next turn goes to the agent that holds it, with the transcript so
//! far; a message sent while a turn runs waits for it, or is refused. The
//! scripted model stand-ins count what each agent's model was asked.

use std::time::Duration;

use baton_testkit::{FakeLlm, Scripted};
use serde_json::Value;

use crate::gateways::a2a::client;
use crate::util::{System, llm_table};

/// The router (entry `triage`), an LLM `triage` that may hand off to an
/// LLM `refunds`, and the A2A gateway with `flags`; the gateway's URL.
async fn desk(
    triage: &FakeLlm,
    refunds: &FakeLlm,
    flags: &[&str],
) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    desk_with(triage, refunds, Desk::default(), flags).await
}

/// What [`desk_with`] adds to the specs.
#[derive(Default)]
pub(crate) struct Desk<'a> {
    /// Top-level keys of `triage`'s spec.
    pub(crate) triage: &'a str,
    /// Keys of `refunds`'s `[llm]` table.
    pub(crate) refunds_llm: &'a str,
    /// Flags every worker starts with.
    pub(crate) workers: &'a [&'a str],
    /// Flags the router starts with, beside its entry.
    pub(crate) router: &'a [&'a str],
}

/// [`desk`] with `more` in the specs.
pub(crate) async fn desk_with(
    triage: &FakeLlm,
    refunds: &FakeLlm,
    more: Desk<'_>,
    flags: &[&str],
) -> anyhow::Result<(System, String, tempfile::TempDir)> {
    let specs = [
        (
            "triage",
            format!(
                "name = \"triage\"\nkind = \"llm\"\n{}\n\n[[handoffs]]\nto = \"refunds\"\n{}",
                more.triage,
                llm_table(triage, "")
            ),
        ),
        (
            "refunds",
            format!(
                "name = \"refunds\"\nkind = \"llm\"\n{}",
                llm_table(refunds, more.refunds_llm)
            ),
        ),
    ];
    let (mut system, dir) = crate::util::spec_workers_with(&specs, more.workers).await?;
    let mut router = vec!["--default-agent", "triage", "--no-registry"];
    router.extend_from_slice(more.router);
    system.router(&router).await?;
    let mut args = vec!["a2a", "serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    system.spawn("a2a", &args, "A2A server listening").await?;
    let url = system.logged_url("a2a")?;
    Ok((system, url, dir))
}

/// [`desk`] where only `triage` answers, with `script`: its stand-in model,
/// the system, the gateway's URL and the specs' folder.
async fn lone(
    script: Vec<Scripted>,
    flags: &[&str],
) -> anyhow::Result<(FakeLlm, System, String, tempfile::TempDir)> {
    let triage = FakeLlm::start(script)?;
    let refunds = FakeLlm::start(vec![])?;
    let (system, url, dir) = desk(&triage, &refunds, flags).await?;
    Ok((triage, system, url, dir))
}

/// A stand-in model for `triage` that hands the first turn to `refunds`.
pub(crate) fn transferring() -> anyhow::Result<FakeLlm> {
    Ok(FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer_to_refunds",
        r#"{"reason": "refund"}"#,
    )])])?)
}

/// The first text of an A2A task summary's answer.
pub(crate) fn answer(task: &Value) -> &str {
    task["answer"][0].as_str().unwrap_or_default()
}

/// The chat messages of request `n` to `llm`, as `role: content` lines.
pub(crate) fn asked(llm: &FakeLlm, n: usize) -> Vec<String> {
    llm.requests()[n].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            format!(
                "{}: {}",
                m["role"].as_str().unwrap_or_default(),
                m["content"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_turn_goes_to_the_holder_with_the_conversation_so_far() -> anyhow::Result<()> {
    let triage = FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer_to_refunds",
        r#"{"reason": "refund"}"#,
    )])])?;
    let refunds = FakeLlm::start(vec![
        Scripted::text("Who are you?"),
        Scripted::text("Please confirm the refund of 49.5."),
        Scripted::text("Refund done."),
    ])?;
    let (_system, url, _dir) = desk(&triage, &refunds, &[]).await?;
    let context = uuid::Uuid::new_v4().to_string();
    let mut answers = Vec::new();
    let mut tasks = Vec::new();
    for text in [
        "I want a refund for ABC-123.",
        "I am Ada Lovelace.",
        "Yes, go ahead.",
    ] {
        let turn = client(&url, "say", &[&context, text])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
        assert_eq!(turn["context"], context.as_str(), "{turn}");
        answers.push(answer(&turn).to_owned());
        tasks.push(turn["id"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(
        answers,
        [
            "Who are you?",
            "Please confirm the refund of 49.5.",
            "Refund done."
        ]
    );
    // Triage's model was asked once: turns 2 and 3 went to the holder.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 3));
    // The holder's model saw turns 1 and 2 and their answers, in order.
    let third = asked(&refunds, 2);
    let users: Vec<&String> = third.iter().filter(|m| m.starts_with("user: ")).collect();
    assert_eq!(
        users,
        [
            "user: I want a refund for ABC-123.",
            "user: I am Ada Lovelace.",
            "user: Yes, go ahead."
        ],
        "{third:#?}"
    );
    let said: Vec<&String> = third
        .iter()
        .filter(|m| m.starts_with("assistant: ") && m.len() > 11)
        .collect();
    assert!(
        said.iter().any(|m| m.ends_with("Who are you?"))
            && said
                .iter()
                .any(|m| m.ends_with("Please confirm the refund of 49.5.")),
        "{third:#?}"
    );
    // ListTasks by context lists the turns.
    let listed = client(&url, "list", &[&context])?;
    assert_eq!(listed["total"], 3, "{listed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_gateways_taking_turns_on_one_conversation_run_each_turn_once_in_order()
-> anyhow::Result<()> {
    // A gateway starts a turn of a conversation it settled last without
    // reading the record first; here the other gateway wrote it since, so
    // that copy is stale, and the turn must still run once, in order.
    let triage = FakeLlm::start(vec![Scripted::tool_calls(&[(
        "transfer_to_refunds",
        r#"{"reason": "refund"}"#,
    )])])?;
    let refunds = FakeLlm::start(
        ["one", "two", "three", "four", "five"]
            .map(|said| Scripted::text(&format!("Answer {said}.")))
            .to_vec(),
    )?;
    let (mut system, first, _dir) = desk(&triage, &refunds, &[]).await?;
    system
        .spawn(
            "a2a-2",
            &["a2a", "serve", "--listen", "127.0.0.1:0"],
            "A2A server listening",
        )
        .await?;
    let second = system.logged_url("a2a-2")?;
    let context = uuid::Uuid::new_v4().to_string();
    let gateways = [&first, &second, &first, &first, &second];
    let mut answers = Vec::new();
    for (n, url) in gateways.iter().enumerate() {
        let turn = client(url, "say", &[&context, &format!("Message {}.", n + 1)])?;
        assert_eq!(turn["state"], "TASK_STATE_COMPLETED", "{turn}");
        answers.push(answer(&turn).to_owned());
    }
    assert_eq!(
        answers,
        [
            "Answer one.",
            "Answer two.",
            "Answer three.",
            "Answer four.",
            "Answer five."
        ]
    );
    // One triage call, then one holder call per turn: none doubled.
    assert_eq!((triage.requests().len(), refunds.requests().len()), (1, 5));
    let last = asked(&refunds, 4);
    let users: Vec<&String> = last.iter().filter(|m| m.starts_with("user: ")).collect();
    assert_eq!(
        users,
        [
            "user: Message 1.",
            "user: Message 2.",
            "user: Message 3.",
            "user: Message 4.",
            "user: Message 5."
        ],
        "{last:#?}"
    );
    let listed = client(&second, "list", &[&context])?;
    assert_eq!(listed["total"], 5, "{listed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_while_a_turn_runs_waits_for_it_and_sees_its_answer() -> anyhow::Result<()> {
    let (triage, _system, url, _dir) = lone(
        vec![
            Scripted::text("First answered.").after(Duration::from_millis(1500)),
            Scripted::text("Second answered."),
        ],
        &[],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let both = client(
        &url,
        "double",
        &[&context, "first question", "second question", "0.3", "{}"],
    )?;
    assert_eq!(both["first"]["state"], "TASK_STATE_COMPLETED", "{both}");
    assert_eq!(both["second"]["state"], "TASK_STATE_COMPLETED", "{both}");
    assert_eq!(answer(&both["first"]), "First answered.");
    assert_eq!(answer(&both["second"]), "Second answered.");
    // The second turn ran after the first, and its model saw the first.
    assert_eq!(triage.requests().len(), 2);
    let second = asked(&triage, 1);
    assert_eq!(
        second,
        [
            "user: first question",
            "assistant: First answered.",
            "user: second question"
        ],
        "{second:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_while_a_turn_runs_is_refused_under_reject() -> anyhow::Result<()> {
    let (triage, _system, url, _dir) = lone(
        vec![Scripted::text("First answered.").after(Duration::from_millis(1500))],
        &["--overlap", "reject"],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let both = client(
        &url,
        "double",
        &[&context, "first question", "second question", "0.3", "{}"],
    )?;
    assert_eq!(both["first"]["state"], "TASK_STATE_COMPLETED", "{both}");
    let refused = both["second"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        both["second"]["error"], "UnsupportedOperationError",
        "{both}"
    );
    assert!(
        refused.contains("is busy") && refused.contains("turn 1"),
        "{refused}"
    );
    assert_eq!(
        triage.requests().len(),
        1,
        "the refused message reached no model"
    );
    // A message may choose for itself: enqueue, against the gateway's reject.
    let again = client(
        &url,
        "say",
        &[&context, "third question", r#"{"overlap": "bogus"}"#],
    )?;
    assert_eq!(again["error"], "InvalidParamsError", "{again}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_mid_turn_loses_no_turn_and_the_queue_runs_in_order() -> anyhow::Result<()>
{
    let (triage, mut system, url, _dir) = lone(
        vec![
            Scripted::text("First answered.").after(Duration::from_millis(2000)),
            Scripted::text("Second answered."),
            Scripted::text("Third answered."),
        ],
        &[],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let posted = client(&url, "post", &[&context, "one", "two", "three"])?;
    let ids: Vec<String> = posted["ids"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|id| id.as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 3, "{posted}");
    // The gateway that queued turns two and three dies while turn one runs:
    // the router's keeper starts them when their turn comes.
    system.process("a2a").kill9();
    let mut ends = Vec::new();
    for id in &ids {
        let session: uuid::Uuid = id.parse()?;
        let end = system.client.wait(session, Duration::from_secs(30)).await?;
        assert_eq!(end.kind, baton_proto::EventType::Completed, "{id}");
        let stored = system.stored_events(session).await?;
        ends.push(stored.iter().filter(|e| e.kind.is_terminal()).count());
    }
    assert_eq!(ends, [1, 1, 1], "each turn ends once");
    // In order, each seeing the one before: three model calls in all.
    assert_eq!(triage.requests().len(), 3);
    let third = asked(&triage, 2);
    assert_eq!(
        third,
        [
            "user: one",
            "assistant: First answered.",
            "user: two",
            "assistant: Second answered.",
            "user: three"
        ],
        "{third:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupting_message_cancels_the_running_turn_and_runs_with_both() -> anyhow::Result<()>
{
    let (triage, _system, url, _dir) = lone(
        vec![
            Scripted::text("Never read.").after(Duration::from_secs(5)),
            Scripted::text("Both answered."),
        ],
        &[],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let meta = r#"{"overlap": "interrupt"}"#;
    let both = client(
        &url,
        "double",
        &[&context, "first question", "actually, this", "0.3", meta],
    )?;
    assert_eq!(both["first"]["state"], "TASK_STATE_CANCELED", "{both}");
    assert_eq!(both["second"]["state"], "TASK_STATE_COMPLETED", "{both}");
    assert_eq!(answer(&both["second"]), "Both answered.");
    // The new turn's model saw both messages, and nothing of the cancelled turn.
    assert_eq!(triage.requests().len(), 2);
    let second = asked(&triage, 1);
    assert_eq!(
        second,
        ["user: first question", "user: actually, this"],
        "{second:#?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_asks_the_user_and_resumes_once_from_its_journal() -> anyhow::Result<()> {
    let (triage, mut system, url, dir) = lone(
        vec![
            Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]),
            Scripted::text("Refunding ABC-123."),
            Scripted::tool_calls(&[("ask_user", r#"{"question": "Anything else?"}"#)]),
            Scripted::text("Goodbye."),
        ],
        &[],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let asked = client(&url, "say", &[&context, "I want a refund."])?;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let status = asked["status"][0].as_str().unwrap_or_default();
    assert!(status.contains("Which order?"), "{asked}");
    // The worker dies while the turn waits; another takes over.
    system.process("triage").kill9();
    let spec = dir
        .path()
        .join("triage.toml")
        .to_string_lossy()
        .into_owned();
    let args = ["worker", "--spec", spec.as_str(), "--no-registry"];
    system.spawn("triage2", &args, "worker started").await?;
    // The answer, delivered twice, resumes the turn once.
    let task = asked["id"].as_str().unwrap_or_default();
    let answers = client(&url, "answer_twice", &[task, "ABC-123"])?;
    assert_eq!(
        answers["first"]["state"], "TASK_STATE_COMPLETED",
        "{answers}"
    );
    assert_eq!(answer(&answers["first"]), "Refunding ABC-123.");
    assert!(answers["again"]["error"].is_string(), "{answers}");
    // Two model calls in the turn: the one that asked, the one that answered.
    assert_eq!(triage.requests().len(), 2);
    let resumed = asked_tool(&triage, 1);
    assert_eq!(resumed, ("ask_user".to_owned(), "ABC-123".to_owned()));
    // A plain next message of the context answers a question too.
    let asked = client(&url, "say", &[&context, "Thanks."])?;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let done = client(&url, "say", &[&context, "No, that is all."])?;
    assert_eq!(done["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["id"], asked["id"], "the answer is no new turn: {done}");
    assert_eq!(answer(&done), "Goodbye.");
    assert_eq!(triage.requests().len(), 4);
    Ok(())
}

/// The tool call answered last in request `n` to `llm`: the name the model
/// called and the result it was given.
fn asked_tool(llm: &FakeLlm, n: usize) -> (String, String) {
    let body = &llm.requests()[n].body;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let result = messages.last().cloned().unwrap_or_default();
    let call = &messages[messages.len().saturating_sub(2)]["tool_calls"][0]["function"]["name"];
    (
        call.as_str().unwrap_or_default().to_owned(),
        result["content"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_whose_starter_died_before_sending_it_is_sent_by_the_router() -> anyhow::Result<()> {
    let (triage, system, _url, _dir) = lone(vec![Scripted::text("Answered at last.")], &[]).await?;
    // What a gateway killed between storing the turn and sending its task
    // leaves: a running turn, not sent, written a while ago.
    let mut record = baton_proto::Conversation::new("orphaned", None, None);
    let session = uuid::Uuid::new_v4();
    record.turns = 1;
    let mut running = baton_proto::TurnMessage::new("is anyone there?");
    running.session = session;
    record.running = Some(running);
    record.updated_at = baton_proto::now_ms() - 60_000;
    let jetstream = async_nats::jetstream::new(system.nats.clone());
    let bucket = jetstream
        .get_key_value(system.client.subjects().conversations_bucket())
        .await?;
    let key = baton_proto::Conversation::key_of("orphaned");
    bucket
        .put(&key, rmp_serde::to_vec_named(&record)?.into())
        .await?;
    let end = system.client.wait(session, Duration::from_secs(30)).await?;
    assert_eq!(end.kind, baton_proto::EventType::Completed);
    assert_eq!(
        end.output.as_ref().and_then(|o| o.as_str()),
        Some("Answered at last.")
    );
    // Sent once, and noted so: the record is settled, the holder set.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stored = bucket.get(&key).await?.expect("the record");
    let record: baton_proto::Conversation = rmp_serde::from_slice(&stored)?;
    assert_eq!(
        (record.running, record.holder.as_deref()),
        (None, Some("triage"))
    );
    assert_eq!(triage.requests().len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_answers_an_agents_question_with_baton_inbox_reply_or_the_console()
-> anyhow::Result<()> {
    let (triage, mut system, url, _dir) = lone(
        vec![
            Scripted::tool_calls(&[("ask_user", r#"{"question": "Which order?"}"#)]),
            Scripted::text("Refunding XYZ-9."),
            Scripted::tool_calls(&[("ask_user", r#"{"question": "<b>Which</b> card?"}"#)]),
            Scripted::text("To the card ending 42."),
        ],
        &[],
    )
    .await?;
    let context = uuid::Uuid::new_v4().to_string();
    let asked = client(&url, "say", &[&context, "Refund please."])?;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
    let entry: Value = serde_json::from_str(listed.lines().next().unwrap_or_default())?;
    assert_eq!(
        (
            &entry["reason"],
            &entry["tool"],
            &entry["arguments"]["question"]
        ),
        (
            &Value::from("input_required"),
            &Value::from("ask_user"),
            &Value::from("Which order?")
        ),
        "{entry}"
    );
    let id = entry["id"].as_str().unwrap_or_default();
    let said = system.baton_stdout(&["inbox", "reply", id, "XYZ-9"])?;
    assert!(said.contains("answered"), "{said}");
    let session: uuid::Uuid = asked["id"].as_str().unwrap_or_default().parse()?;
    let end = system.client.wait(session, Duration::from_secs(30)).await?;
    assert_eq!(
        end.output.as_ref().and_then(|o| o.as_str()),
        Some("Refunding XYZ-9.")
    );
    assert_eq!(triage.requests().len(), 2);
    assert_eq!(
        asked_tool(&triage, 1),
        ("ask_user".to_owned(), "XYZ-9".to_owned())
    );

    // The next question, answered from the console's Inbox page.
    let console = crate::gateways::console::console(&mut system, "console", &[]).await?;
    let asked = client(&url, "say", &[&context, "And pay it back how?"])?;
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let session = asked["id"].as_str().unwrap_or_default();
    let seen =
        crate::gateways::console::browser(&["decide", &console, session, "answered", "card 42"])?;
    assert_eq!(
        seen["question"], "<b>Which</b> card?",
        "shown as text: {seen}"
    );
    assert_eq!(seen["buttons"], serde_json::json!(["answered"]), "{seen}");
    assert!(
        seen["notice"]
            .as_str()
            .unwrap_or_default()
            .contains("decided"),
        "{seen}"
    );
    let end = system
        .client
        .wait(session.parse()?, Duration::from_secs(30))
        .await?;
    let said = end.output.as_ref().and_then(|o| o.as_str());
    assert_eq!(said, Some("To the card ending 42."));
    assert_eq!(
        asked_tool(&triage, 3),
        ("ask_user".to_owned(), "card 42".to_owned())
    );
    Ok(())
}

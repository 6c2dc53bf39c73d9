//! A turn's end is settled where it is followed: the `Turn` a message
//! returns closes its conversation's turn before it gives the end, for the
//! CLI and a library caller alike, with no router's keeper running; a turn
//! nobody follows stays open until something closes it.

use std::time::Duration;

use baton_client::conversation::{Conversations, Taken, UserMessage};
use baton_proto::EventType;
use futures::StreamExt;

use crate::util::System;

#[tokio::test(flavor = "multi_thread")]
async fn a_followed_turn_is_closed_before_its_end_is_given_and_an_unfollowed_one_is_not()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The router writes its defaults, so a turn goes straight to its agent
    // type; then it stops, and its keeper with it: nothing else closes turns.
    system.router(&[]).await?;
    system.relay("helper", "helper", &["--no-registry"]).await?;
    system.process("router").terminate();
    let conversations = Conversations::open(system.client.clone(), 1).await?;

    // The CLI follows its turn: closed when `send --wait` returns.
    let sent = [
        "send",
        "--conversation",
        "cli",
        "--to",
        "helper",
        "--wait",
        "Hello there",
    ];
    let printed = system.baton_stdout(&sent)?;
    assert!(printed.contains("answer:"), "{printed}");
    let (record, _) = conversations.get("cli").await?.expect("the conversation");
    assert_eq!(record.running, None, "the CLI's turn is closed: {record:?}");
    assert_eq!(record.holder.as_deref(), Some("helper"));
    assert_eq!(record.turns, 1);

    // A library caller following its `Turn`: the end comes closed.
    let message = || {
        let mut message = UserMessage::new("Hello again");
        message.turn.to = Some(baton_proto::AgentName::from_static("helper"));
        message
    };
    let turn = conversations.say("lib", message()).await?;
    assert!(
        matches!(turn.taken, Taken::Started { turn: 1, .. }),
        "{turn:?}"
    );
    let mut events = turn.events().await?;
    let mut last = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(30), events.next()).await? {
        last = Some(event?);
    }
    assert_eq!(last.map(|end| end.kind), Some(EventType::Completed));
    let (record, _) = conversations.get("lib").await?.expect("the conversation");
    assert_eq!(record.running, None, "closed by its follower: {record:?}");

    // Nobody follows this one: it ends and stays open.
    let turn = conversations.say("unfollowed", message()).await?;
    let session = turn.session();
    drop(turn);
    let events = (system.session_events(session, Duration::from_secs(30))).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (record, _) = conversations
        .get("unfollowed")
        .await?
        .expect("the conversation");
    assert_eq!(
        record.running.as_ref().map(|running| running.session),
        Some(session),
        "nothing closed it"
    );
    // `settle` closes it as the keeper would.
    conversations.settle("unfollowed").await?;
    let (record, _) = conversations
        .get("unfollowed")
        .await?
        .expect("the conversation");
    assert_eq!(record.running, None, "closed when settled");
    Ok(())
}

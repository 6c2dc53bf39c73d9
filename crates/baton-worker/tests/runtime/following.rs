//! A follower that goes on from what it has seen (the asking session,
//! once its question is answered) skips those events by identity: the
//! pieces of a streamed answer that arrive live before the stored events
//! are read never make it skip the wrong ones.

use std::time::Duration;

use baton_client::{Client, Seen};
use baton_proto::{Delta, Event, EventType, Subjects, Wire};
use baton_testkit::NatsServer;
use futures::StreamExt;
use uuid::Uuid;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_past_a_question_skips_what_it_saw_whatever_arrives_live_first()
-> anyhow::Result<()> {
    let server = tokio::task::spawn_blocking(NatsServer::start).await??;
    let nats = async_nats::connect(server.url()).await?;
    let subjects = Subjects::default();
    let client = Client::new(nats.clone(), subjects.clone());
    client.ensure_streams().await?;
    let jetstream = async_nats::jetstream::new(nats.clone());
    let session = Uuid::new_v4();
    let stored = |kind| Event::new(Uuid::new_v4(), session, kind);
    // The asking hop: three stored events, the last its question.
    for kind in [EventType::Accepted, EventType::Started, EventType::Waiting] {
        let event = stored(kind);
        let subject = subjects.events(session);
        jetstream
            .publish(subject, event.to_msgpack()?.into())
            .await?
            .await?;
    }
    let seen = client.history(session).await?;
    assert_eq!(seen.len(), 3, "{seen:?}");
    let seen = Seen::of(&seen);

    // The answer lets the hop go on: its answer streams live at once,
    // before the follower has read the stored events.
    let mut events = client.follow_after(session, seen).await?;
    let hop = Uuid::new_v4();
    let pieces: Vec<Event> = (0..4u64)
        .map(|n| {
            let piece = Delta {
                envelope: hop,
                step: 1,
                offset: n,
                text: "x".to_owned(),
            };
            piece.event(session, &baton_proto::AgentName::from_static("triage"))
        })
        .collect();
    for piece in &pieces {
        nats.publish(subjects.live(session), piece.to_msgpack()?.into())
            .await?;
    }
    nats.flush().await?;
    // The pieces have arrived before the follower reads any of it; the
    // question it saw is the last stored event.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let wait = Duration::from_secs(5);
    let mut got = Vec::new();
    for _ in &pieces {
        let event = tokio::time::timeout(wait, events.next()).await?;
        got.push(event.expect("the follower goes on past the question")?);
    }
    let kinds: Vec<EventType> = got.iter().map(|event| event.kind.clone()).collect();
    assert!(
        kinds.iter().all(|kind| *kind == EventType::Delta),
        "the live pieces, and not the question again: {kinds:?}"
    );
    let mut ids: Vec<Uuid> = got.iter().map(|event| event.id).collect();
    let mut expected: Vec<Uuid> = pieces.iter().map(|piece| piece.id).collect();
    ids.sort();
    expected.sort();
    assert_eq!(ids, expected, "every piece once");
    // Nothing more yet, and the follower still waits (the question it saw
    // is no place to rest).
    let quiet = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(
        quiet.is_err(),
        "the follower waits for the answer's end: {quiet:?}"
    );
    // The answer's end, stored later, ends it.
    let end = stored(EventType::Completed);
    jetstream
        .publish(subjects.events(session), end.to_msgpack()?.into())
        .await?
        .await?;
    let last = tokio::time::timeout(wait, events.next()).await?;
    assert_eq!(
        last.map(|event| event.map(|event| event.id).ok()),
        Some(Some(end.id))
    );
    assert!(
        tokio::time::timeout(wait, events.next()).await?.is_none(),
        "it ends there"
    );
    Ok(())
}

//! Faults found by chaos and fuzz runs, each checked for its exact outcome:
//! a session ends once whatever path would end it again; a deadline no
//! server can hold is refused at intake, and a timer never spins; a task
//! that outgrows the payload limit at the router ends as `too_large`; a
//! dead letter too large to store lands cut to fit, saying so.

use std::time::Duration;

use baton_proto::{DeadLetterReason, DeadlineTimer, Envelope, EventType, Reason, Wire};

use crate::util::{System, kinds};

/// The terminal events stored for `session`.
async fn terminals(
    system: &System,
    session: uuid::Uuid,
) -> anyhow::Result<Vec<baton_proto::Event>> {
    let mut events = system.stored_events(session).await?;
    events.retain(|event| event.kind.is_terminal());
    Ok(events)
}

/// Runs `baton ARGS`, which must fail with `needle` on stderr.
fn fails_saying(system: &System, args: &[&str], needle: &str) -> anyhow::Result<()> {
    let output = system.baton(args).output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{args:?} succeeded: {stderr}");
    assert!(stderr.contains(needle), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_past_any_sane_range_is_refused_at_intake_with_one_terminal_event()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--default-agent", "front"]).await?;
    system.relay("front", "front", &["--no-fallback"]).await?;

    // Through the ingress, and straight to the agent's subject: both refuse.
    let via_router = Envelope::task("forever, via the router").with_deadline(u64::MAX);
    system
        .publish_envelope("baton.ingress", &via_router)
        .await?;
    let direct = Envelope::task("forever, direct").with_deadline(i64::MAX.unsigned_abs());
    system
        .publish_envelope("baton.agent.front", &direct)
        .await?;
    system.settled().await?;

    for (task, letter_subject) in [
        (&via_router, "baton.dlq.ingress"),
        (&direct, "baton.dlq.front"),
    ] {
        let ends = terminals(&system, task.session).await?;
        assert_eq!(ends.len(), 1, "one end for {}: {ends:#?}", task.session);
        assert_eq!(ends[0].kind, EventType::Failed);
        assert_eq!(
            ends[0].reason,
            Some(Reason::from(&DeadLetterReason::Malformed))
        );
        let detail = ends[0].detail.clone().unwrap_or_default();
        assert!(detail.contains("within a year"), "{detail}");
        let letters = system.client.dead_letters().await?;
        let letter = letters
            .iter()
            .find(|letter| letter.session == Some(task.session))
            .expect("a dead letter");
        assert_eq!(letter.subject, letter_subject);
        assert_eq!(letter.reason, DeadLetterReason::Malformed);
    }

    // The client refuses before it publishes anything.
    fails_saying(
        &system,
        &["send", "--deadline-ms", "99999999999999", "forever"],
        "within a year",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timer_that_no_server_can_hold_waits_instead_of_failing_a_completed_session()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--default-agent", "front"]).await?;
    system.relay("front", "front", &["--no-fallback"]).await?;
    let task = Envelope::task("done quickly");
    let events = system.run("front", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );

    // The timer a client with no limits would publish for 2^64 - 1: it was
    // redelivered 20 times in a second, and the max-deliveries net then
    // wrote `failed` for the completed session.
    let timer = DeadlineTimer::new(task.session, u64::MAX);
    system
        .publish_raw("baton.agent._deadline", timer.to_msgpack()?)
        .await?;
    let jetstream = async_nats::jetstream::new(system.nats.clone());
    let mut deliveries = 0;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = jetstream
            .get_stream("BATON_TASKS")
            .await?
            .get_consumer("deadlines")
            .await
            .map_err(|err| anyhow::anyhow!("{err}"))?;
        // Every delivery, redeliveries included, takes a consumer sequence.
        deliveries = consumer.info().await?.delivered.consumer_sequence;
    }
    println!("the timer was delivered {deliveries} time(s) in 3 s");
    assert_eq!(deliveries, 1, "held once, not redelivered");
    assert!(system.client.dead_letters().await?.is_empty());
    let ends = terminals(&system, task.session).await?;
    assert_eq!(kinds(&ends), ["completed"], "{ends:#?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_of_an_ended_session_lands_without_a_second_end() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("front", "front", &["--no-fallback"]).await?;
    let task = Envelope::task("ends once");
    let events = system.run("front", &task).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );

    // A leftover of the same session that no worker can read: a newer
    // protocol version. It is dead-lettered, and the session keeps its end.
    let mut leftover = Envelope::task("from the future");
    leftover.session = task.session;
    leftover.v = 2;
    let bytes = leftover.to_msgpack()?;
    system.publish_raw("baton.agent.front", bytes).await?;
    system.settled().await?;

    let letters = system.client.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].reason, DeadLetterReason::UnsupportedVersion);
    let stored = system.stored_events(task.session).await?;
    let ends: Vec<_> = stored.iter().filter(|e| e.kind.is_terminal()).collect();
    assert_eq!(ends.len(), 1, "{stored:#?}");
    assert_eq!(ends[0].kind, EventType::Completed);
    assert!(
        !stored.iter().any(|e| e.kind == EventType::DeadLettered),
        "no dead_lettered event after the end: {:?}",
        kinds(&stored)
    );

    // A cancel after the end changes nothing either.
    let cancelled = system
        .baton(&["cancel", &task.session.to_string()])
        .output()?;
    assert_eq!(cancelled.status.code(), Some(1), "the session had ended");
    assert_eq!(
        kinds(&terminals(&system, task.session).await?),
        ["completed"]
    );
    Ok(())
}

/// An envelope whose encoding is exactly `size` bytes, padded with a variable.
fn envelope_of(size: usize) -> anyhow::Result<Envelope> {
    let mut task = Envelope::task("big");
    let mut pad = 0;
    for _ in 0..4 {
        task.context
            .variables
            .insert("padding".to_owned(), "x".repeat(pad).into());
        let got = task.to_msgpack()?.len();
        if got == size {
            return Ok(task);
        }
        pad = (pad + size)
            .checked_sub(got)
            .ok_or_else(|| anyhow::anyhow!("{size} bytes is too small"))?;
    }
    anyhow::bail!("could not pad an envelope to {size} bytes")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_outgrows_the_limit_at_the_router_ends_too_large_with_its_letter_cut_to_fit()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--default-agent", "front"]).await?;
    system.relay("front", "front", &["--no-fallback"]).await?;
    let limit = system.nats.server_info().max_payload;

    // A sparse trace of 100,000 entries (about 900 KB) passes the router
    // without growing, and completes.
    let mut sparse = Envelope::task("many small steps");
    let step: baton_proto::Step =
        rmpv::ext::from_value(rmpv::Value::Map(vec![("agent".into(), "a".into())]))?;
    sparse.context.trace = vec![step; 100_000];
    let size = sparse.to_msgpack()?.len();
    assert!(size > 800_000 && size < limit, "{size}");
    system.publish_envelope("baton.ingress", &sparse).await?;
    let events = system
        .session_events(sparse.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );

    // A task just under the limit, which forwarding (a target, a trace
    // header) takes over it: `too_large`, once, and a dead letter that
    // lands although its bytes and reason headers are over the limit.
    // (The ingress copy is stored with only its `Nats-Msg-Id` header, 63
    // bytes; the forwarded one adds `to` to the payload.)
    let size = limit - 63;
    let big = envelope_of(size)?;
    system.publish_envelope("baton.ingress", &big).await?;
    let events = system
        .session_events(big.session, Duration::from_secs(30))
        .await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Failed);
    assert_eq!(end.reason, Some(Reason::from(&DeadLetterReason::TooLarge)));
    system.settled().await?;
    assert_eq!(terminals(&system, big.session).await?.len(), 1);
    let letters = system.client.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    let letter = &letters[0];
    assert_eq!(letter.subject, "baton.dlq.ingress");
    assert_eq!(letter.reason, DeadLetterReason::TooLarge);
    assert_eq!(letter.truncated, Some(u64::try_from(size)?));
    assert!(letter.payload.len() < size, "{}", letter.payload.len());

    // It cannot be replayed, and says why.
    fails_saying(
        &system,
        &["dlq", "replay", &letter.seq.to_string()],
        "cannot be replayed",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_message_at_the_payload_limit_still_lands_in_the_dead_letter_queue()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("front", "front", &["--no-fallback"]).await?;
    let limit = system.nats.server_info().max_payload;
    // A readable session, but a `kind` of the wrong type: the worker fails
    // the session and keeps the bytes as a dead letter, which with its
    // reason headers is over the limit.
    let task = envelope_of(limit - 100)?;
    let mut value = rmpv::decode::read_value(&mut &task.to_msgpack()?[..])?;
    if let rmpv::Value::Map(fields) = &mut value {
        for (key, field) in fields.iter_mut() {
            if key.as_str() == Some("kind") {
                *field = rmpv::Value::from(42);
            }
        }
    }
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &value)?;
    let size = bytes.len();
    system.publish_raw("baton.agent.front", bytes).await?;
    system.settled().await?;
    let letters = system.client.dead_letters().await?;
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0].reason, DeadLetterReason::Malformed);
    assert_eq!(letters[0].truncated, Some(u64::try_from(size)?));
    assert!(letters[0].payload.len() < size);
    let ends = terminals(&system, task.session).await?;
    assert_eq!(ends.len(), 1, "{ends:#?}");
    assert_eq!(
        ends[0].reason,
        Some(Reason::from(&DeadLetterReason::Malformed))
    );
    Ok(())
}

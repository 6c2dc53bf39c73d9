//! Failure paths: retries, exhausted attempts, fatal errors and bad input all
//! end in a terminal event or a dead letter with the right reason.

use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{Envelope, EventType};
use baton_testkit::eventually;

use crate::util::{System, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn a_retryable_failure_succeeds_on_the_third_attempt() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "f1",
            "flaky",
            &[
                "--fail-attempts",
                "2",
                "--max-attempts",
                "3",
                "--min-backoff-ms",
                "50",
                "--no-fallback",
            ],
        )
        .await?;
    let task = Envelope::task("try hard");
    let events = system.run("flaky", &task).await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "retrying",
            "accepted",
            "retrying",
            "accepted",
            "completed"
        ]
    );
    let attempts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::Accepted)
        .map(|e| e.attempt)
        .collect();
    assert_eq!(attempts, [Some(1), Some(2), Some(3)]);
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_attempts_dead_letter_with_max_attempts_and_fail() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "d1",
            "doomed",
            &[
                "--fail-attempts",
                "99",
                "--max-attempts",
                "3",
                "--min-backoff-ms",
                "20",
                "--no-fallback",
            ],
        )
        .await?;
    let task = Envelope::task("never works");
    let events = system.run("doomed", &task).await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "retrying",
            "accepted",
            "retrying",
            "accepted",
            "dead_lettered",
            "failed"
        ]
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("max_attempts")
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "max_attempts");
    assert_eq!(dead[0].agent, "doomed");
    assert_eq!(dead[0].subject, "baton.dlq.doomed");
    assert_eq!(dead[0].original_subject, "baton.agent.doomed");
    assert_eq!(dead[0].deliveries, 3);
    assert_eq!(dead[0].session, Some(task.session));
    assert_eq!(
        dead[0].envelope,
        Some(task.id),
        "the dead letter keeps the original bytes"
    );
    assert!(
        dead[0].detail.contains("gave up after 3 attempts"),
        "{}",
        dead[0].detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fatal_error_escalates_to_the_fallback_after_dead_lettering() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("x1", "broken", &["--fatal", "--fallback", "desk"])
        .await?;
    system.relay("h1", "desk", &[]).await?;
    let task = Envelope::task("fix it");
    let events = system.run("broken", &task).await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "dead_lettered",
            "escalated",
            "accepted",
            "completed"
        ]
    );
    let escalated = &events[2];
    assert_eq!(escalated.to.as_deref(), Some("desk"));
    assert_eq!(escalated.reason.as_ref().map(|r| r.as_str()), Some("fatal"));
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "fatal");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_dead_lettered_with_its_reason_and_the_worker_keeps_serving()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("s1", "sink", &["--max-payload", "4096", "--no-fallback"])
        .await?;

    system
        .publish_raw(
            "baton.agent.sink",
            b"\xc1\xc1 definitely not msgpack".to_vec(),
        )
        .await?;

    let mut newer = Envelope::task("from the future");
    newer.v = 2;
    system.publish_envelope("baton.agent.sink", &newer).await?;

    let big = Envelope::task("x".repeat(10_000));
    system.publish_envelope("baton.agent.sink", &big).await?;

    let good = Envelope::task("still there?");
    let events = system.run("sink", &good).await?;
    assert_eq!(events.last().unwrap().kind, EventType::Completed);

    // The sessions of readable-but-refused envelopes end with the reason, so no client waits forever.
    for (envelope, reason) in [(&newer, "unsupported_version"), (&big, "too_large")] {
        let events = system
            .session_events(envelope.session, Duration::from_secs(10))
            .await?;
        assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
        assert_eq!(events[1].reason.as_ref().map(|r| r.as_str()), Some(reason));
    }

    let mut reasons: Vec<_> = system
        .client
        .dead_letters()
        .await?
        .iter()
        .map(|d| d.reason.as_str().to_owned())
        .collect();
    reasons.sort();
    assert_eq!(reasons, ["malformed", "too_large", "unsupported_version"]);
    let dead = system.client.dead_letters().await?;
    let malformed = dead
        .iter()
        .find(|d| d.reason.as_str() == "malformed")
        .unwrap();
    assert_eq!(
        &malformed.payload[..],
        b"\xc1\xc1 definitely not msgpack",
        "original bytes are kept"
    );
    assert_eq!(malformed.agent, "sink");
    assert_eq!(malformed.original_subject, "baton.agent.sink");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_replayed_after_a_fix_completes() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("p1", "picky", &["--fatal", "--no-fallback"])
        .await?;
    let task = Envelope::task("second time lucky");
    let events = system.run("picky", &task).await?;
    assert_eq!(events.last().unwrap().kind, EventType::Failed);
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);

    let listing = system.baton(&["dlq", "ls"]).output()?;
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains("picky")
            && text.contains("fatal")
            && text.contains(&task.session.to_string()),
        "{text}"
    );

    // "Fix" the agent: replace the worker with a healthy one, then replay.
    system.process("p1").terminate();
    system.relay("p2", "picky", &["--no-fallback"]).await?;
    let output = system
        .baton(&["dlq", "replay", &dead[0].seq.to_string()])
        .output()?;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        system.client.dead_letters().await?.is_empty(),
        "replay removes the dead letter"
    );

    let done = eventually(Duration::from_secs(20), || async {
        let stored = system.stored_events(task.session).await?;
        stored
            .iter()
            .find(|e| e.kind == EventType::Completed)
            .cloned()
            .with_context(|| format!("replayed task did not complete: {:?}", kinds(&stored)))
    })
    .await?;
    assert_eq!(done.path[0].instance, "p2");

    let missing = system.baton(&["dlq", "replay", "999"]).output()?;
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no dead letter with sequence 999"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_left_after_a_store_failure_comes_again_in_seconds_not_after_its_ack_wait()
-> anyhow::Result<()> {
    use async_nats::jetstream;
    let mut system = System::start().await?;
    let lead = [
        "--delegate",
        "helper",
        "--ack-wait-secs",
        "120",
        "--no-fallback",
    ];
    system.relay("lead", "lead", &lead).await?;
    system.relay("helper", "helper", &[]).await?;
    // A first delegation opens the join bucket.
    let first = system.run("lead", &Envelope::task("first")).await?;
    assert_eq!(kinds(&first).last().map(String::as_str), Some("completed"));
    // Then the bucket's stream is gone: the next delegation cannot record
    // its join, and the message is left for redelivery.
    let js = jetstream::new(system.nats.clone());
    let config = js
        .get_stream("KV_BATON_JOINS")
        .await?
        .info()
        .await?
        .config
        .clone();
    js.delete_stream("KV_BATON_JOINS").await?;
    let task = Envelope::task("second");
    system
        .client
        .submit_to(&baton_proto::AgentName::new("lead")?, &task)
        .await?;
    system
        .wait_log(
            "lead",
            "cannot start the delegation",
            Duration::from_secs(30),
        )
        .await?;
    js.create_stream(config).await?;
    // It comes again after a second or two, not after its 120 s ack_wait.
    let events = system
        .session_events(task.session, Duration::from_secs(20))
        .await
        .context("the left message did not come again within 20 s")?;
    assert_eq!(kinds(&events).last().map(String::as_str), Some("completed"));
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

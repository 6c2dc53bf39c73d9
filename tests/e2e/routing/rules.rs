//! Loop detection, the hop budget, deadlines and the ingress router.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType, now_ms};

use crate::util::{System, agents, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn a_to_b_to_a_is_caught_and_escalated_to_the_human() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("a1", "ping", &["--next", "pong", "--fallback", "human"])
        .await?;
    system
        .relay("b1", "pong", &["--next", "ping", "--fallback", "human"])
        .await?;
    system.relay("h1", "human", &[]).await?;
    let task = Envelope::task("bounce");
    let events = system.run("ping", &task).await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "handoff",
            "accepted",
            "loop_detected",
            "escalated",
            "accepted",
            "completed"
        ]
    );
    let detected = &events[3];
    assert_eq!(detected.agent.as_deref(), Some("pong"));
    assert_eq!(detected.to.as_deref(), Some("ping"));
    assert_eq!(
        detected.reason.as_ref().map(|r| r.as_str()),
        Some("loop_detected")
    );
    assert_eq!(events[4].to.as_deref(), Some("human"));
    let completed = events.last().unwrap();
    assert_eq!(agents(&completed.path), ["ping", "pong", "human"]);
    assert_eq!(
        completed.path[2].reason.as_ref().map(|r| r.as_str()),
        Some("loop_detected")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn max_hops_is_enforced_and_deadlines_fail_the_session() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("h1", "hop1", &["--next", "hop2", "--no-fallback"])
        .await?;
    system
        .relay("h2", "hop2", &["--next", "hop3", "--no-fallback"])
        .await?;
    system
        .relay("h3", "hop3", &["--next", "hop4", "--no-fallback"])
        .await?;
    system.relay("h4", "hop4", &["--no-fallback"]).await?;
    let hop1 = AgentName::new("hop1")?;

    let budgeted = Envelope::task("go far").with_max_hops(3);
    system.client.submit_to(&hop1, &budgeted).await?;
    let events = system
        .session_events(budgeted.session, Duration::from_secs(30))
        .await?;
    let failed = events.last().unwrap();
    assert_eq!(failed.kind, EventType::Failed);
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("loop_detected")
    );
    assert!(
        failed
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("hop budget of 3"),
        "{failed:?}"
    );
    assert_eq!(agents(&failed.path), ["hop1", "hop2", "hop3"]);
    assert!(kinds(&events).contains(&"loop_detected".to_owned()));

    // The same chain with the default budget completes.
    let unbudgeted = Envelope::task("go far");
    system.client.submit_to(&hop1, &unbudgeted).await?;
    let events = system
        .session_events(unbudgeted.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        agents(&events.last().unwrap().path),
        ["hop1", "hop2", "hop3", "hop4"]
    );

    let late = Envelope::task("too late").with_deadline(now_ms().saturating_sub(1_000));
    system.client.submit_to(&hop1, &late).await?;
    let events = system
        .session_events(late.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    let dead = system.client.dead_letters().await?;
    assert!(
        dead.iter()
            .any(|d| d.reason.as_str() == "deadline_exceeded" && d.session == Some(late.session))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_sends_tasks_to_to_or_the_default_agent_else_fails_with_no_route()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--default-agent", "front"]).await?;
    system.relay("f1", "front", &[]).await?;
    system.relay("s1", "special", &[]).await?;

    let plain = Envelope::task("hello");
    system.client.submit(&plain).await?;
    let events = system
        .session_events(plain.session, Duration::from_secs(30))
        .await?;
    assert_eq!(agents(&events.last().unwrap().path), ["front"]);

    let directed = Envelope::task("hello").with_to(baton_proto::AgentName::from_static("special"));
    system.client.submit(&directed).await?;
    let events = system
        .session_events(directed.session, Duration::from_secs(30))
        .await?;
    assert_eq!(agents(&events.last().unwrap().path), ["special"]);

    let invalid =
        Envelope::task("hello").with_to(baton_proto::AgentName::unchecked("No Such Agent!"));
    system.client.submit(&invalid).await?;
    let events = system
        .session_events(invalid.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("no_route")
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "no_route");
    assert_eq!(dead[0].subject, "baton.dlq.ingress");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_router_without_a_default_fails_tasks_without_to() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&[]).await?;
    let task = Envelope::task("anyone?");
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        events.last().unwrap().reason.as_ref().map(|r| r.as_str()),
        Some("no_route")
    );
    assert!(
        events
            .last()
            .unwrap()
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("--default-agent")
    );
    Ok(())
}

/// Each top-level field of the map in `bytes`, as its key and the bytes of
/// its value, read with the third-party `rmpv` decoder.
fn raw_fields(bytes: &[u8]) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut reader = bytes;
    let count = rmp::decode::read_map_len(&mut reader)?;
    let mut fields = Vec::new();
    for _ in 0..count {
        let key = rmpv::decode::read_value(&mut reader)?;
        let before = reader;
        rmpv::decode::read_value(&mut reader)?;
        let value = before[..before.len() - reader.len()].to_vec();
        fields.push((key.as_str().unwrap_or_default().to_owned(), value));
    }
    Ok(fields)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_forwards_every_field_it_does_not_route_on_byte_for_byte() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    system.router(&["--default-agent", "slow"]).await?;
    // Slow, so the forwarded task waits in the stream while it is read.
    system.relay("s1", "slow", &["--work-ms", "5000"]).await?;
    // A task as some other writer encodes it: fields in its own order, a
    // variable as a 32-bit float, and a field this version does not know,
    // holding 7 as a 64-bit integer. A decode and re-encode would write
    // the float in 64 bits, the 7 in one byte and the fields in Baton's
    // order.
    let task = Envelope::task("as sent").with_variable("price", 1.5);
    let value = rmpv::ext::to_value(&task)?;
    let mut fields = value.as_map().expect("a map").clone();
    fields.reverse();
    let mut bytes = Vec::new();
    rmp::encode::write_map_len(&mut bytes, u32::try_from(fields.len() + 1)?)?;
    for (key, value) in &fields {
        rmpv::encode::write_value(&mut bytes, key)?;
        if key.as_str() == Some("context") {
            let mut context = value.as_map().expect("a map").clone();
            for (name, variables) in &mut context {
                if name.as_str() == Some("variables") {
                    *variables = rmpv::Value::Map(vec![("price".into(), rmpv::Value::F32(1.5))]);
                }
            }
            rmpv::encode::write_value(&mut bytes, &rmpv::Value::Map(context))?;
        } else {
            rmpv::encode::write_value(&mut bytes, value)?;
        }
    }
    rmp::encode::write_str(&mut bytes, "x_future")?;
    rmp::encode::write_u64(&mut bytes, 7)?;
    let sent = raw_fields(&bytes)?;
    system.publish_raw("baton.ingress", bytes).await?;
    // The task as the router wrote it to the agent type's subject.
    let js = async_nats::jetstream::new(system.nats.clone());
    let stream = js.get_stream("BATON_TASKS").await?;
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let forwarded = loop {
        match stream
            .get_last_raw_message_by_subject("baton.agent.slow")
            .await
        {
            Ok(message) => break message.payload,
            Err(err) => anyhow::ensure!(
                tokio::time::Instant::now() < until,
                "the task never reached baton.agent.slow: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let forwarded = raw_fields(&forwarded)?;
    // What routing changes: the id, target and time of the new envelope, and
    // the defaults the router adds.
    let changed = ["v", "id", "kind", "to", "created_at", "deadline", "budget"];
    let untouched: Vec<_> = sent
        .iter()
        .filter(|(key, _)| !changed.contains(&key.as_str()))
        .collect();
    let kept: Vec<_> = forwarded
        .iter()
        .filter(|(key, _)| !changed.contains(&key.as_str()))
        .collect();
    assert_eq!(
        kept, untouched,
        "every untouched field, in order, byte for byte"
    );
    assert!(
        kept.iter()
            .any(|(key, value)| key == "x_future" && value.len() == 9),
        "the unknown field with its 64-bit 7"
    );
    let to = forwarded
        .iter()
        .find(|(key, _)| key == "to")
        .expect("a `to`");
    assert_eq!(
        rmpv::decode::read_value(&mut to.1.as_slice())?,
        "slow".into()
    );
    // And the agent runs it as any task.
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events).last().map(String::as_str), Some("completed"));
    Ok(())
}

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

    let directed = Envelope::task("hello").with_to("special");
    system.client.submit(&directed).await?;
    let events = system
        .session_events(directed.session, Duration::from_secs(30))
        .await?;
    assert_eq!(agents(&events.last().unwrap().path), ["special"]);

    let invalid = Envelope::task("hello").with_to("No Such Agent!");
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

//! Unknown targets: a handoff, a send or a routed task naming an agent type
//! no worker serves fails at once with `no_route`, naming the type; a pool
//! that is only down is not unknown, and its tasks wait for it.

use baton_proto::{AgentName, DeadLetterReason, Envelope, EventType};

use crate::util::{System, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn a_handoff_to_an_agent_type_nobody_serves_fails_with_no_route() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("t1", "typo", &["--next", "refnud", "--no-fallback"])
        .await?;
    let task = Envelope::task("hand this to a team that does not exist");
    let events = system.run("typo", &task).await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "dead_lettered", "failed"],
        "no handoff event for an envelope never sent"
    );
    let failed = events.last().unwrap();
    assert_eq!(failed.reason.as_ref().map(|r| r.as_str()), Some("no_route"));
    let detail = failed.detail.clone().unwrap_or_default();
    assert!(detail.contains("\"refnud\""), "{detail}");
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, DeadLetterReason::NoRoute);
    system.settled().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn send_to_an_agent_type_nobody_serves_is_an_error_naming_it() -> anyhow::Result<()> {
    let system = System::start().await?;
    for flags in [&["--wait"][..], &["--direct"][..]] {
        let output = system
            .baton(&["send", "--to", "no_such_agent", "hello"])
            .args(flags)
            .output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{flags:?}: {stderr}");
        assert!(stderr.contains("\"no_such_agent\""), "{stderr}");
        assert!(stderr.contains("baton worker no_such_agent"), "{stderr}");
    }
    // Nothing was published.
    let tasks = system.client.jetstream().get_stream("BATON_TASKS").await;
    if let Ok(mut tasks) = tasks {
        assert_eq!(tasks.info().await?.state.messages, 0);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_fails_a_task_for_an_agent_type_nobody_serves() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    let task =
        Envelope::task("misaddressed").with_to(baton_proto::AgentName::from_static("refnud"));
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, std::time::Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("no_route")
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].agent, "ingress");
    assert!(dead[0].detail.contains("\"refnud\""), "{}", dead[0].detail);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_that_is_down_keeps_its_tasks_until_it_is_back() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("d1", "dozy", &["--no-fallback"]).await?;
    system.process("d1").terminate();
    let task = Envelope::task("wait for me");
    system
        .client
        .submit_to(&AgentName::new("dozy")?, &task)
        .await?;
    // Nobody has handled it, and it has not failed.
    assert!(system.stored_events(task.session).await?.is_empty());
    system.relay("d2", "dozy", &["--no-fallback"]).await?;
    let events = system
        .session_events(task.session, std::time::Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["accepted", "completed"]);
    assert_eq!(events[1].kind, EventType::Completed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delegation_to_an_agent_type_nobody_serves_fails_with_no_route() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay(
            "p1",
            "planner",
            &["--delegate", "writer,nobody_here", "--no-fallback"],
        )
        .await?;
    system.relay("w1", "writer", &["--no-fallback"]).await?;
    let events = system
        .run("planner", &Envelope::task("split this up"))
        .await?;
    assert_eq!(kinds(&events), ["accepted", "dead_lettered", "failed"]);
    let failed = events.last().unwrap();
    assert_eq!(failed.reason.as_ref().map(|r| r.as_str()), Some("no_route"));
    let detail = failed.detail.clone().unwrap_or_default();
    assert!(detail.contains("\"nobody_here\""), "{detail}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inbox_answer_handing_off_to_an_unknown_type_is_refused_and_the_task_stays()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.human_support().await?;
    let task = Envelope::task("please pass me on");
    system
        .client
        .submit_to(&AgentName::new("human_support")?, &task)
        .await?;
    let waiting = system.waiting(task.session).await?;
    let id = waiting.envelope.unwrap().to_string();
    let reply = system
        .baton(&["inbox", "reply", &id, "over to you", "--handoff", "refnud"])
        .output()?;
    let stderr = String::from_utf8_lossy(&reply.stderr);
    assert!(!reply.status.success());
    assert!(stderr.contains("\"refnud\""), "{stderr}");
    let listed = system.baton(&["inbox", "ls", "--json"]).output()?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().count(),
        1,
        "the task is still waiting: {listed}"
    );
    assert!(listed.contains(&id));
    Ok(())
}

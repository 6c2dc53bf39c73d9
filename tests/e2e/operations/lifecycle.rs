//! Process lifecycle: a worker killed with SIGKILL mid-flight loses and
//! doubles nothing; a worker stopped with SIGTERM finishes what it holds.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};
use baton_testkit::eventually;

use crate::util::{System, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_flight_loses_nothing_and_doubles_nothing() -> anyhow::Result<()> {
    const TASKS: usize = 200;
    let mut system = System::start().await?;
    system
        .relay("a1", "intake", &["--next", "work", "--concurrency", "16"])
        .await?;
    // The middle stage is slow, so the kill lands while it holds messages.
    system
        .relay(
            "b1",
            "work",
            &[
                "--next",
                "finish",
                "--work-ms",
                "50",
                "--concurrency",
                "8",
                "--ack-wait-secs",
                "2",
            ],
        )
        .await?;
    system
        .relay("c1", "finish", &["--concurrency", "16"])
        .await?;

    let intake = AgentName::new("intake")?;
    let mut sessions = Vec::new();
    for index in 0..TASKS {
        let task = Envelope::task(format!("job {index}"));
        system.client.submit_to(&intake, &task).await?;
        sessions.push(task.session);
    }
    // Let the slow stage get going, then kill it without warning.
    system
        .wait_log("b1", "worker started", Duration::from_secs(5))
        .await?;
    eventually(Duration::from_secs(30), || async {
        let completed = system
            .all_events()
            .await?
            .iter()
            .filter(|e| e.kind == EventType::Completed)
            .count();
        anyhow::ensure!(
            completed >= 20,
            "only {completed} tasks completed before the kill"
        );
        Ok(())
    })
    .await?;
    system.process("b1").kill9();
    system
        .relay(
            "b2",
            "work",
            &[
                "--next",
                "finish",
                "--work-ms",
                "20",
                "--concurrency",
                "8",
                "--ack-wait-secs",
                "2",
            ],
        )
        .await?;

    let mut handoff_ids = HashSet::new();
    let mut by_worker: HashMap<String, usize> = HashMap::new();
    for session in &sessions {
        let events = system
            .session_events(*session, Duration::from_secs(90))
            .await?;
        assert_eq!(
            events.last().unwrap().kind,
            EventType::Completed,
            "{:?}",
            kinds(&events)
        );
        *by_worker
            .entry(events.last().unwrap().path[1].instance.clone())
            .or_default() += 1;
    }
    system.settled().await?;
    let all = system.events_by_session().await?;
    for session in &sessions {
        let stored = &all[session];
        assert_eq!(
            stored.iter().filter(|e| e.kind.is_terminal()).count(),
            1,
            "{session}: {:?}",
            kinds(stored)
        );
        let handoffs: Vec<_> = stored
            .iter()
            .filter(|e| e.kind == EventType::Handoff)
            .collect();
        assert_eq!(handoffs.len(), 2, "{session}: {:?}", kinds(stored));
        for handoff in handoffs {
            assert!(
                handoff_ids.insert(handoff.id),
                "handoff event {} stored twice",
                handoff.id
            );
        }
    }
    // The kill landed mid-flight: messages b1 held were delivered again to b2.
    let redelivered = all
        .values()
        .flatten()
        .filter(|e| {
            e.kind == EventType::Accepted
                && e.agent.as_deref() == Some("work")
                && e.attempt.unwrap_or(1) > 1
        })
        .count();
    assert!(
        redelivered > 0,
        "no message was in flight at b1 when it was killed"
    );
    // Every message ever stored in the work stream, counted by the server:
    // one task plus two handoff envelopes per session, not one more.
    let js = async_nats::jetstream::new(system.nats.clone());
    let info = js.get_stream("BATON_TASKS").await?.get_info().await?;
    assert_eq!(
        info.state.last_sequence,
        (TASKS * 3) as u64,
        "a handoff envelope was stored twice"
    );
    assert_eq!(info.state.messages, 0, "the work queue is drained");
    assert!(system.client.dead_letters().await?.is_empty());
    assert!(
        by_worker.get("b1").copied().unwrap_or(0) > 0
            && by_worker.get("b2").copied().unwrap_or(0) > 0,
        "{by_worker:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_in_flight_work_and_leaves_the_rest_to_another_replica()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let slow = [
        "--work-ms",
        "1500",
        "--concurrency",
        "2",
        "--ack-wait-secs",
        "3",
        "--shutdown-grace-secs",
        "10",
    ];
    system.relay("s1", "slow", &slow).await?;
    let agent = AgentName::new("slow")?;
    let mut sessions = Vec::new();
    for index in 0..6 {
        let task = Envelope::task(format!("slow {index}"));
        system.client.submit_to(&agent, &task).await?;
        sessions.push(task.session);
    }
    // Wait until s1 holds two tasks, then ask it to stop.
    let in_flight = eventually(Duration::from_secs(10), || async {
        let accepted: Vec<_> = system
            .all_events()
            .await?
            .into_iter()
            .filter(|e| e.kind == EventType::Accepted)
            .map(|e| e.session)
            .collect();
        assert!(
            accepted.len() <= 2,
            "s1 took more than its concurrency: {accepted:?}"
        );
        anyhow::ensure!(accepted.len() == 2, "s1 holds {} tasks", accepted.len());
        Ok(accepted)
    })
    .await?;
    system.process("s1").terminate();
    system.relay("s2", "slow", &slow).await?;

    let status =
        tokio::task::block_in_place(|| system.process("s1").wait_timeout(Duration::from_secs(15)));
    assert!(
        status.is_some_and(|s| s.success()),
        "s1 should exit cleanly after finishing; stderr:\n{}",
        system.process("s1").stderr()
    );
    // Its two messages finished within the grace: it reports none abandoned
    // (the hand-back of open pull requests is not a message).
    let stderr = system.process("s1").stderr();
    assert!(
        stderr.contains("finishing in-flight work in_flight=2"),
        "{stderr}"
    );
    assert!(!stderr.contains("grace period over"), "{stderr}");
    for session in &sessions {
        let events = system
            .session_events(*session, Duration::from_secs(60))
            .await?;
        let completed = events.last().unwrap();
        assert_eq!(completed.kind, EventType::Completed);
        let expected = if in_flight.contains(session) {
            "s1"
        } else {
            "s2"
        };
        assert_eq!(
            completed.path[0].instance,
            expected,
            "session {session}: {:?}",
            kinds(&events)
        );
        // In-flight work was finished, not abandoned and redone.
        if in_flight.contains(session) {
            assert_eq!(
                events
                    .iter()
                    .filter(|e| e.kind == EventType::Accepted)
                    .count(),
                1
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_that_keeps_killing_its_worker_is_dead_lettered_unread() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let flags = [
        "--work-ms",
        "60000",
        "--ack-wait-secs",
        "1",
        "--max-attempts",
        "1",
        "--max-deliveries",
        "2",
        "--no-fallback",
    ];
    system.relay("k1", "crashy", &flags).await?;
    let task = Envelope::task("this one takes the worker down");
    system
        .client
        .submit_to(&AgentName::new("crashy")?, &task)
        .await?;
    // Two deliveries, each killing the worker that took it.
    for (attempt, next) in [(1, "k2"), (2, "k3")] {
        eventually(Duration::from_secs(30), || async {
            let accepted = system
                .stored_events(task.session)
                .await?
                .iter()
                .filter(|e| e.kind == EventType::Accepted)
                .count();
            anyhow::ensure!(accepted == attempt, "{accepted} accepted, want {attempt}");
            Ok(())
        })
        .await?;
        let current = if attempt == 1 { "k1" } else { "k2" };
        system.process(current).kill9();
        system.relay(next, "crashy", &flags).await?;
    }
    // The third delivery is not run: it is dead-lettered, and the session fails.
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "accepted", "dead_lettered", "failed"]
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("max_deliveries")
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].deliveries, 3);
    system.settled().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_whose_last_delivery_is_never_settled_is_caught_from_the_advisory()
-> anyhow::Result<()> {
    use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
    let mut system = System::start().await?;
    // One slot, held by a long first task: the worker pulls nothing else.
    let flags = [
        "--concurrency",
        "1",
        "--work-ms",
        "60000",
        "--max-attempts",
        "1",
        "--max-deliveries",
        "2",
    ];
    system.relay("busy", "busy", &flags).await?;
    let agent = AgentName::new("busy")?;
    let first = Envelope::task("keeps the worker busy");
    system.client.submit_to(&agent, &first).await?;
    eventually(Duration::from_secs(30), || async {
        let stored = system.stored_events(first.session).await?;
        anyhow::ensure!(stored.iter().any(|e| e.kind == EventType::Accepted));
        Ok(())
    })
    .await?;
    // A foreign consumer member takes the second task and never settles it
    // (it naks): the consumer allows max_deliveries + 1 = 3 deliveries.
    let stranded = Envelope::task("taken by a member that never settles");
    system.client.submit_to(&agent, &stranded).await?;
    let js = jetstream::new(system.nats.clone());
    let consumer: PullConsumer = js
        .get_stream("BATON_TASKS")
        .await?
        .get_consumer("agent-busy")
        .await
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    assert_eq!(consumer.cached_info().config.max_deliver, 3);
    let mut deliveries = 0;
    while deliveries < 3 {
        let mut batch = consumer
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await?;
        if let Some(message) = futures::StreamExt::next(&mut batch).await {
            let message = message.map_err(|err| anyhow::anyhow!("{err}"))?;
            message
                .ack_with(AckKind::Nak(None))
                .await
                .map_err(|err| anyhow::anyhow!("{err}"))?;
            deliveries += 1;
        }
    }
    // The next pull finds the message over its limit: the server skips it
    // and sends the advisory.
    let mut batch = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(1))
        .messages()
        .await?;
    assert!(futures::StreamExt::next(&mut batch).await.is_none());
    // The busy worker hears the advisory: one dead letter, one failure.
    let events = system
        .session_events(stranded.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["dead_lettered", "failed"]);
    assert_eq!(
        events[1].reason.as_ref().map(|r| r.as_str()),
        Some("max_deliveries")
    );
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].session, Some(stranded.session));
    assert_eq!(dead[0].deliveries, 3);
    // The message left the work queue: only the first task remains.
    let mut tasks = js.get_stream("BATON_TASKS").await?;
    assert_eq!(tasks.info().await?.state.messages, 1);
    let stored = system.stored_events(stranded.session).await?;
    assert_eq!(kinds(&stored), ["dead_lettered", "failed"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_killed_and_restarted_mid_run_loses_and_doubles_nothing() -> anyhow::Result<()> {
    const SESSIONS: usize = 300;
    let mut system = System::start().await?;
    // An ack lost with the server comes back after ack_wait: keep it short.
    let stages = [
        ("r1", "intake", Some("work")),
        ("r2", "work", Some("finish")),
        ("r3", "finish", None),
    ];
    for (label, agent, next) in stages {
        let mut args = vec![
            "--concurrency",
            "16",
            "--ack-wait-secs",
            "5",
            "--work-ms",
            "20",
        ];
        args.extend(next.map(|next| ["--next", next]).into_iter().flatten());
        system.relay(label, agent, &args).await?;
    }
    let agent = AgentName::new("intake")?;
    let tasks: Vec<Envelope> = (0..SESSIONS)
        .map(|n| Envelope::task(format!("session {n}")))
        .collect();
    for task in &tasks[..SESSIONS / 2] {
        system.client.submit_to(&agent, task).await?;
    }
    // Some sessions are done, others are mid-flight: kill -9 the server and
    // start it again on the same port and store.
    eventually(Duration::from_secs(60), || async {
        let done = completed(&system.all_events().await?);
        anyhow::ensure!(done >= 20, "{done} completed");
        Ok(())
    })
    .await?;
    tokio::task::block_in_place(|| system.server.restart())?;
    let restarted = std::time::Instant::now();
    let restarted_ms = baton_proto::now_ms();
    // The client reconnects too, and its publishes are retried.
    for task in &tasks[SESSIONS / 2..] {
        system.client.submit_to(&agent, task).await?;
    }
    let by_session = eventually(Duration::from_secs(120), || async {
        let by_session = system.events_by_session().await?;
        let done = completed(&by_session.values().flatten().cloned().collect::<Vec<_>>());
        anyhow::ensure!(done == SESSIONS, "{done} of {SESSIONS} completed");
        Ok(by_session)
    })
    .await?;
    // For the closing note: how soon work resumed (the workers pull again
    // when they reconnect, not when their old pull requests would expire).
    let first = tasks[SESSIONS / 2..]
        .iter()
        .filter_map(|task| {
            let events = &by_session[&task.session];
            events
                .iter()
                .find(|e| e.kind == EventType::Accepted)
                .map(|e| e.at)
        })
        .min()
        .unwrap_or_default();
    println!(
        "restart: first new session accepted {} ms after the restart; all {SESSIONS} completed {:?} after it",
        first.saturating_sub(restarted_ms),
        restarted.elapsed()
    );
    for task in &tasks {
        let events = &by_session[&task.session];
        let count = |kind: EventType| events.iter().filter(|e| e.kind == kind).count();
        assert_eq!(
            count(EventType::Handoff),
            2,
            "{}: {:?}",
            task.session,
            kinds(events)
        );
        let terminal = events.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(terminal, 1, "{}: {:?}", task.session, kinds(events));
        assert_eq!(count(EventType::Completed), 1);
    }
    for label in ["r1", "r2", "r3"] {
        assert!(system.process(label).is_running(), "{label} exited");
    }
    // A server killed with -9 may lose acks it had not written yet, and
    // deliver a task that was handed on again after the restart. The worker
    // finds that task's session ended and dead-letters it as
    // `session_ended`, running nothing twice (the counts above hold for
    // every session). Any other dead letter is work lost.
    let ours: HashSet<_> = tasks.iter().map(|task| task.session).collect();
    let dead = system.client.dead_letters().await?;
    let shown: Vec<_> = (dead.iter())
        .map(|d| {
            format!(
                "{} {} {} ({} deliveries): {}",
                d.agent, d.original_subject, d.reason, d.deliveries, d.detail
            )
        })
        .collect();
    let lost = dead.iter().filter(|d| {
        d.reason != baton_proto::DeadLetterReason::SessionEnded
            || d.session.is_none_or(|session| !ours.contains(&session))
    });
    assert_eq!(lost.count(), 0, "dead letters: {shown:#?}");
    if !shown.is_empty() {
        println!("duplicates delivered again after the restart, dead-lettered: {shown:#?}");
    }
    system.settled().await?;
    Ok(())
}

fn completed(events: &[baton_proto::Event]) -> usize {
    events
        .iter()
        .filter(|e| e.kind == EventType::Completed)
        .map(|e| e.session)
        .collect::<HashSet<_>>()
        .len()
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_to_one_of_two_replicas_under_load_loses_and_doubles_nothing() -> anyhow::Result<()>
{
    const SESSIONS: usize = 200;
    let mut system = System::start().await?;
    system
        .relay("in", "intake", &["--next", "work", "--concurrency", "16"])
        .await?;
    let work = ["--next", "finish", "--concurrency", "8", "--work-ms", "30"];
    system.relay("w1", "work", &work).await?;
    system.relay("w2", "work", &work).await?;
    system
        .relay("out", "finish", &["--concurrency", "16"])
        .await?;
    let agent = AgentName::new("intake")?;
    let tasks: Vec<Envelope> = (0..SESSIONS)
        .map(|n| Envelope::task(format!("session {n}")))
        .collect();
    for task in &tasks {
        system.client.submit_to(&agent, task).await?;
    }
    // Under load: both replicas are working when w1 is asked to stop.
    eventually(Duration::from_secs(60), || async {
        let done = completed(&system.all_events().await?);
        anyhow::ensure!(done >= 20, "{done} completed");
        Ok(())
    })
    .await?;
    system.process("w1").terminate();
    let status =
        tokio::task::block_in_place(|| system.process("w1").wait_timeout(Duration::from_secs(30)));
    assert!(
        status.is_some_and(|s| s.success()),
        "w1 did not drain cleanly"
    );
    let by_session = eventually(Duration::from_secs(120), || async {
        let by_session = system.events_by_session().await?;
        let done = completed(&by_session.values().flatten().cloned().collect::<Vec<_>>());
        anyhow::ensure!(done == SESSIONS, "{done} of {SESSIONS} completed");
        Ok(by_session)
    })
    .await?;
    let mut by_replica: HashMap<String, usize> = HashMap::new();
    for task in &tasks {
        let events = &by_session[&task.session];
        let handoffs = events
            .iter()
            .filter(|e| e.kind == EventType::Handoff)
            .count();
        assert_eq!(handoffs, 2, "{}: {:?}", task.session, kinds(events));
        let terminal = events.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(terminal, 1, "{}: {:?}", task.session, kinds(events));
        let end = events
            .iter()
            .find(|e| e.kind == EventType::Completed)
            .unwrap();
        *by_replica.entry(end.path[1].instance.clone()).or_default() += 1;
    }
    // Both replicas took a share before the drain.
    assert!(
        by_replica.get("w1").copied().unwrap_or(0) > 0,
        "{by_replica:?}"
    );
    assert!(
        by_replica.get("w2").copied().unwrap_or(0) > 0,
        "{by_replica:?}"
    );
    system.settled().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_root_task_on_an_ended_session_is_dead_lettered_with_no_new_event()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("echo", "echo", &["--no-fallback"]).await?;
    system.router(&["--default-agent", "echo"]).await?;
    let first = Envelope::task("once");
    system.client.submit(&first).await?;
    let end = system
        .client
        .wait(first.session, Duration::from_secs(20))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    let before = system.stored_events(first.session).await?.len();

    // A careless client sends two more tasks in the same session: through
    // the router, and straight to the agent type.
    let mut again = Envelope::task("twice");
    again.session = first.session;
    system.client.submit(&again).await?;
    let mut direct = Envelope::task("thrice");
    direct.session = first.session;
    system
        .client
        .submit_to(&AgentName::new("echo")?, &direct)
        .await?;

    let dead = eventually(Duration::from_secs(20), || async {
        let dead = system.client.dead_letters().await?;
        anyhow::ensure!(dead.len() == 2, "{} dead letters", dead.len());
        Ok(dead)
    })
    .await?;
    let mut by = dead
        .iter()
        .map(|d| (d.reason.as_str().to_owned(), d.agent.clone(), d.envelope))
        .collect::<Vec<_>>();
    by.sort();
    assert_eq!(
        by,
        [
            (
                "session_ended".to_owned(),
                "echo".to_owned(),
                Some(direct.id)
            ),
            (
                "session_ended".to_owned(),
                "ingress".to_owned(),
                Some(again.id)
            ),
        ]
    );
    assert!(
        dead[0].detail.contains("ended (completed)"),
        "{}",
        dead[0].detail
    );
    system.settled().await?;
    let after = system.stored_events(first.session).await?;
    assert_eq!(after.len(), before, "no new event: {:?}", kinds(&after));
    assert_eq!(after.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    Ok(())
}

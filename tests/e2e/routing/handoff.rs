//! Handoffs across processes: context integrity, event order, trace context,
//! and a pool of replicas sharing work.

use anyhow::Context as _;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType, Message, Role, Wire};
use futures::StreamExt as _;

use crate::util::{System, agents, field, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn three_hop_handoff_carries_the_full_context() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("a1", "alpha", &["--next", "beta"]).await?;
    system.relay("b1", "beta", &["--next", "gamma"]).await?;
    system.relay("c1", "gamma", &[]).await?;

    let mut task = Envelope::task("plan my trip").with_variable("city", "Lisbon");
    task.context
        .messages
        .push(Message::new(Role::System, "be brief"));
    task.context.state.insert("seed".into(), 7.into());
    // A W3C trace context from the caller must survive every hop.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let js = async_nats::jetstream::new(system.nats.clone());
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", task.id.to_string().as_str());
    headers.insert(
        "traceparent",
        format!("00-{trace_id}-00f067aa0ba902b7-01").as_str(),
    );
    js.publish_with_headers("baton.agent.alpha", headers, task.to_msgpack()?.into())
        .await?
        .await?;

    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(
        kinds(&events),
        [
            "accepted",
            "handoff",
            "accepted",
            "handoff",
            "accepted",
            "completed"
        ],
        "{events:#?}"
    );
    let handoffs: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::Handoff)
        .collect();
    assert_eq!(handoffs[0].agent.as_deref(), Some("alpha"));
    assert_eq!(handoffs[0].to.as_deref(), Some("beta"));
    assert_eq!(handoffs[1].to.as_deref(), Some("gamma"));
    let accepted: Vec<_> = events
        .iter()
        .filter(|e| e.kind == EventType::Accepted)
        .map(|e| e.agent.clone().unwrap())
        .collect();
    assert_eq!(accepted, ["alpha", "beta", "gamma"]);

    let completed = events.last().unwrap();
    assert_eq!(agents(&completed.path), ["alpha", "beta", "gamma"]);
    assert_eq!(completed.path[1].instance, "b1");
    assert_eq!(
        completed.path[1].reason.as_ref().map(|r| r.as_str()),
        Some("out_of_scope")
    );
    let output = completed.output.as_ref().expect("output");
    let messages: Vec<_> = field(output, "messages")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "plan my trip",
            "be brief",
            "alpha was here",
            "beta was here"
        ]
    );
    let variables = field(output, "variables").unwrap();
    assert_eq!(
        field(variables, "city").and_then(|v| v.as_str()),
        Some("Lisbon")
    );
    assert_eq!(
        field(variables, "alpha_attempt").and_then(rmpv::Value::as_u64),
        Some(1)
    );
    assert_eq!(
        field(variables, "beta_attempt").and_then(rmpv::Value::as_u64),
        Some(1)
    );
    let state = field(output, "state").unwrap();
    assert_eq!(field(state, "seed").and_then(rmpv::Value::as_u64), Some(7));
    assert_eq!(field(state, "last").and_then(|v| v.as_str()), Some("beta"));
    let trace: Vec<_> = field(output, "trace")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(trace, ["alpha:relay", "beta:relay"]);

    // Every event of the session carries the caller's trace id.
    let stream = js.get_stream("BATON_EVENTS").await?;
    let mut traced = 0;
    for seq in 1..=stream.get_info().await?.state.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        if !message.subject.ends_with(&task.session.to_string()) {
            continue;
        }
        let traceparent = message
            .headers
            .get("traceparent")
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        assert!(
            traceparent.contains(trace_id),
            "event {seq} has traceparent {traceparent:?}"
        );
        traced += 1;
    }
    // Each hop stored one message: its `accepted` event (restored in
    // `events`) folded into its `handoff` or `completed` event.
    assert_eq!((traced, events.len()), (3, 6), "{:?}", kinds(&events));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_share_the_work_and_every_task_ends_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    for label in ["r1", "r2", "r3"] {
        system
            .relay(label, "pool", &["--concurrency", "4", "--work-ms", "3"])
            .await?;
    }
    let pool = AgentName::new("pool")?;
    let mut sessions = Vec::new();
    for index in 0..240 {
        let task = Envelope::task(format!("task {index}"));
        system.client.submit_to(&pool, &task).await?;
        sessions.push(task.session);
    }
    let mut by_instance: HashMap<String, usize> = HashMap::new();
    for session in &sessions {
        let events = system
            .session_events(*session, Duration::from_secs(60))
            .await?;
        let terminal: Vec<_> = events.iter().filter(|e| e.kind.is_terminal()).collect();
        assert_eq!(terminal.len(), 1);
        assert_eq!(terminal[0].kind, EventType::Completed);
        *by_instance
            .entry(terminal[0].path[0].instance.clone())
            .or_default() += 1;
    }
    // Once every session has ended, nothing more may arrive: exactly one terminal event each.
    system.settled().await?;
    let stored = system.events_by_session().await?;
    for session in &sessions {
        let events = &stored[session];
        assert_eq!(
            events.iter().filter(|e| e.kind.is_terminal()).count(),
            1,
            "session {session}: {:?}",
            kinds(events)
        );
    }
    assert_eq!(by_instance.values().sum::<usize>(), 240);
    let instances: HashSet<_> = by_instance.keys().cloned().collect();
    assert_eq!(
        instances,
        HashSet::from(["r1".to_owned(), "r2".to_owned(), "r3".to_owned()]),
        "{by_instance:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_and_confirmed_settling_hand_off_and_acknowledge_every_message_once()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The first hop settles plainly (the default, said explicitly), the
    // second waits for the server's confirmation.
    let first = ["--no-registry", "--settle", "plain", "--next", "second"];
    system.relay("first", "first", &first).await?;
    let confirmed = ["--no-registry", "--settle", "confirmed"];
    system.relay("second", "second", &confirmed).await?;
    let first = AgentName::new("first")?;
    let mut sessions = Vec::new();
    for n in 0..20 {
        let task = Envelope::task(format!("plain {n}"));
        system.client.submit_to(&first, &task).await?;
        sessions.push(task.session);
    }
    for session in sessions {
        let events = system
            .session_events(session, Duration::from_secs(30))
            .await?;
        let ends = events.iter().filter(|e| e.kind.is_terminal()).count();
        assert_eq!(ends, 1, "{:?}", kinds(&events));
        let end = events.last().unwrap();
        assert_eq!(end.kind, EventType::Completed);
        assert_eq!(agents(&end.path), ["first", "second"]);
    }
    // Each consumer delivered each message once, and none waits for an ack.
    let js = async_nats::jetstream::new(system.nats.clone());
    let stream = js.get_stream("BATON_TASKS").await?;
    for name in ["agent-first", "agent-second"] {
        let stream = &stream;
        let info = baton_testkit::eventually(Duration::from_secs(10), || async move {
            let info = stream
                .consumer_info(name)
                .await
                .map_err(anyhow::Error::msg)?;
            anyhow::ensure!(
                info.num_ack_pending == 0,
                "{} ack pending",
                info.num_ack_pending
            );
            Ok(info)
        })
        .await?;
        let seen = (
            info.num_ack_pending,
            info.num_redelivered,
            info.delivered.consumer_sequence,
        );
        assert_eq!(seen, (0, 0, 20), "{name}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn lean_events_store_only_the_end_and_send_progress_live() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let mut live = system
        .nats
        .subscribe("baton.live.*")
        .await
        .context("subscribing to the live subjects")?;
    // A subscriber of its own says it follows, or `lean` workers send it nothing.
    let scope = baton_nats::live::Scope::All;
    let _following = baton_nats::live::follow(&system.nats, &Default::default(), scope).await;
    let lean = ["--no-registry", "--events", "lean"];
    for (agent, next) in [
        ("first", Some("second")),
        ("second", Some("third")),
        ("third", None),
    ] {
        let mut flags = lean.to_vec();
        if let Some(next) = next {
            flags.extend(["--next", next]);
        }
        if agent == "second" {
            // Longer than `--accepted-after-ms` (100): its `accepted` goes out
            // live while it runs, not folded.
            flags.extend(["--work-ms", "400"]);
        }
        system
            .relay(agent, agent, &flags)
            .await
            .with_context(|| format!("starting the {agent} relay"))?;
    }
    let task = Envelope::task("lean");
    system
        .client
        .submit_to(&AgentName::new("first")?, &task)
        .await
        .context("submitting the task")?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await
        .context("waiting for the session's end")?;
    assert_eq!(end.kind, EventType::Completed);
    // Stored: only the end. Its path keeps each hop's agent, instance,
    // reason, and when it was taken and left.
    let stored = system
        .stored_events(task.session)
        .await
        .context("reading the stored events")?;
    // The last hop was quick: its `accepted` is folded into the stored end,
    // one message, which readers restore as two events.
    assert_eq!(kinds(&stored), ["accepted", "completed"], "{stored:#?}");
    assert_eq!(stored[0].agent.as_deref(), Some("third"));
    let js = async_nats::jetstream::new(system.nats.clone());
    let messages = js
        .get_stream("BATON_EVENTS")
        .await?
        .info()
        .await?
        .state
        .messages;
    assert_eq!(messages, 1, "one stored message for the whole session");
    assert_eq!(agents(&end.path), ["first", "second", "third"]);
    for hop in &end.path {
        let accepted = hop.accepted_at.expect("accepted_at on every hop");
        assert!(accepted <= hop.at, "{hop:?}");
        assert_eq!(
            hop.instance,
            hop.agent.as_str(),
            "the relay's instance is its label"
        );
    }
    let reasons: Vec<_> = end
        .path
        .iter()
        .map(|h| h.reason.as_ref().map(|r| r.as_str().to_owned()))
        .collect();
    assert_eq!(
        reasons,
        [
            None,
            Some("out_of_scope".to_owned()),
            Some("out_of_scope".to_owned())
        ]
    );
    // Live, unstored, on the session's subject: a quick hop's `handoff` with
    // its `accepted` folded in (first); a slow hop's `accepted` while it
    // runs, then its `handoff` (second).
    let mut progress = Vec::new();
    while progress.len() < 3 {
        let message = tokio::time::timeout(Duration::from_secs(10), live.next())
            .await
            .with_context(|| format!("no live progress within 10 s after {progress:?}"))?
            .ok_or_else(|| anyhow::anyhow!("live subscription ended"))?;
        assert_eq!(
            message.subject.as_str(),
            format!("baton.live.{}", task.session)
        );
        let event = baton_proto::Event::from_msgpack(&message.payload)?;
        let mut events = event.unfold();
        let event = events.pop().expect("the event itself");
        let folded = events
            .into_iter()
            .find(|folded| folded.kind == baton_proto::EventType::Accepted);
        if let Some(accepted) = &folded {
            assert_eq!(accepted.envelope, event.envelope);
        }
        progress.push(format!(
            "{} {}{}",
            event.agent.map(String::from).unwrap_or_default(),
            event.kind,
            if folded.is_some() { " +accepted" } else { "" }
        ));
    }
    assert_eq!(
        progress,
        [
            "first handoff +accepted",
            "second accepted",
            "second handoff"
        ]
    );
    // Nothing else goes out live.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), live.next())
            .await
            .is_err(),
        "a fourth live message"
    );
    // `baton watch` shows the session in both levels.
    let watched = tokio::task::block_in_place(|| {
        system.baton(&["watch", &task.session.to_string()]).output()
    })?;
    let text = String::from_utf8_lossy(&watched.stdout);
    assert!(
        watched.status.success() && text.contains("completed"),
        "{text}"
    );
    Ok(())
}

/// Waits until `session` has a stored event of `kind`, reading the stream
/// only (a client's `wait` would follow the session's live events).
async fn stored_until(
    system: &System,
    session: uuid::Uuid,
    kind: EventType,
) -> anyhow::Result<Vec<baton_proto::Event>> {
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stored = system.stored_events(session).await?;
        if stored.iter().any(|event| event.kind == kind) {
            return Ok(stored);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < until,
            "no stored {kind} for {session} within 30 s: {stored:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The live messages on `live` within `quiet` of each other, as "agent kind".
async fn live_seen(
    live: &mut async_nats::Subscriber,
    quiet: Duration,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut seen = Vec::new();
    while let Ok(Some(message)) = tokio::time::timeout(quiet, live.next()).await {
        let event = (baton_proto::Event::from_msgpack(&message.payload)?.unfold())
            .pop()
            .expect("the event itself");
        seen.push((
            message.subject.to_string(),
            format!(
                "{} {}",
                event.agent.map(String::from).unwrap_or_default(),
                event.kind
            ),
        ));
    }
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn lean_workers_publish_live_events_only_for_sessions_someone_follows() -> anyhow::Result<()>
{
    let mut system = System::start().await?;
    // A subscriber that does not say it follows: it sees what followers make
    // the workers publish, and nothing else.
    let mut live = system.nats.subscribe("baton.live.*").await?;
    // `first` stores every event, so the test sees where a session is;
    // `second` is lean and slow, `third` lean.
    // `second` sends its `accepted` live 100 ms into its run
    // (`--accepted-after-ms`), `third` folds its own into its stored end.
    for (agent, flags) in [
        ("first", vec!["--next", "second"]),
        (
            "second",
            vec!["--events", "lean", "--next", "third", "--work-ms", "2500"],
        ),
        ("third", vec!["--events", "lean"]),
    ] {
        let mut all = vec!["--no-registry"];
        all.extend(flags);
        system.relay(agent, agent, &all).await?;
    }
    let first = AgentName::new("first")?;
    // 1. Nobody follows: the session ends, and nothing went out live.
    let unfollowed = Envelope::task("nobody follows");
    system.client.submit_to(&first, &unfollowed).await?;
    let stored = stored_until(&system, unfollowed.session, EventType::Completed).await?;
    assert_eq!(
        agents(&stored.last().expect("the end").path),
        ["first", "second", "third"]
    );
    let seen = live_seen(&mut live, Duration::from_millis(500)).await?;
    assert!(seen.is_empty(), "live events nobody followed: {seen:?}");
    // 2. A follower that starts mid-session, while `second` works: the
    // handoff `second` makes after that reaches it; `second`'s `accepted`,
    // sent as it started, before anyone followed, went nowhere.
    let followed = Envelope::task("followed mid-session");
    system.client.submit_to(&first, &followed).await?;
    stored_until(&system, followed.session, EventType::Handoff).await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let scope = baton_nats::live::Scope::Session(followed.session);
    let following = baton_nats::live::follow(&system.nats, &Default::default(), scope).await;
    stored_until(&system, followed.session, EventType::Completed).await?;
    let seen = live_seen(&mut live, Duration::from_millis(500)).await?;
    let subject = format!("baton.live.{}", followed.session);
    assert_eq!(
        seen,
        [(subject, "second handoff".to_owned())],
        "after the follow, the one live event of the session"
    );
    // 3. The follower has gone: the next session sends nothing live again.
    drop(following);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = Envelope::task("the follower left");
    system.client.submit_to(&first, &after).await?;
    stored_until(&system, after.session, EventType::Completed).await?;
    let seen = live_seen(&mut live, Duration::from_millis(500)).await?;
    assert!(
        seen.is_empty(),
        "live events after the follower left: {seen:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn live_always_publishes_for_subscribers_that_do_not_follow() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let mut live = system.nats.subscribe("baton.live.*").await?;
    // Slower than `--accepted-after-ms`: its `accepted` goes out live on its own.
    let flags = [
        "--no-registry",
        "--events",
        "lean",
        "--live",
        "always",
        "--work-ms",
        "400",
    ];
    system.relay("solo", "solo", &flags).await?;
    let task = Envelope::task("always");
    system
        .client
        .submit_to(&AgentName::new("solo")?, &task)
        .await?;
    let message = tokio::time::timeout(Duration::from_secs(20), live.next())
        .await
        .context("no live event with --live always")?
        .context("subscription ended")?;
    assert_eq!(
        message.subject.as_str(),
        format!("baton.live.{}", task.session)
    );
    Ok(())
}

/// The session's events as stored, one per message, without restoring the
/// `accepted` events folded into them: (type, folded attempt).
async fn stored_as_is(
    system: &System,
    session: uuid::Uuid,
) -> anyhow::Result<Vec<(String, Option<u32>)>> {
    let js = async_nats::jetstream::new(system.nats.clone());
    let stream = js.get_stream("BATON_EVENTS").await?;
    let mut stored = Vec::new();
    for seq in 1..=stream.get_info().await?.state.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        if message.subject.as_str() != format!("baton.events.{session}") {
            continue;
        }
        let event = baton_proto::Event::from_msgpack(&message.payload)?;
        stored.push((
            event.kind.to_string(),
            event.accepted.map(|folded| folded.attempt),
        ));
    }
    Ok(stored)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_hop_folds_its_accepted_event_into_the_next_and_readers_restore_it()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    // quick: fails its first attempt, then hands off, each within the
    // default 100 ms; slow: works 600 ms, so its acceptance is stored while
    // it runs; eager: stores every acceptance at once.
    let agents: [(&str, &[&str]); 3] = [
        ("quick", &["--next", "slow", "--fail-attempts", "1"]),
        ("slow", &["--next", "eager", "--work-ms", "600"]),
        ("eager", &["--accepted-after-ms", "0"]),
    ];
    for (agent, flags) in agents {
        let mut flags = flags.to_vec();
        flags.push("--no-registry");
        system.relay(agent, agent, &flags).await?;
    }
    let task = Envelope::task("fold");
    system
        .client
        .submit_to(&AgentName::new("quick")?, &task)
        .await?;
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    let stored = stored_as_is(&system, task.session).await?;
    let expected: Vec<(String, Option<u32>)> = [
        ("retrying", Some(1)),
        ("handoff", Some(2)),
        ("accepted", None),
        ("handoff", None),
        ("accepted", None),
        ("completed", None),
    ]
    .iter()
    .map(|(kind, attempt)| ((*kind).to_owned(), *attempt))
    .collect();
    assert_eq!(stored, expected);
    // Readers see every acceptance, in place, as if each had been stored.
    let restored = system.stored_events(task.session).await?;
    assert_eq!(
        kinds(&restored),
        [
            "accepted",
            "retrying",
            "accepted",
            "handoff",
            "accepted",
            "handoff",
            "accepted",
            "completed"
        ]
    );
    let accepted: Vec<_> = restored
        .iter()
        .filter(|e| e.kind == EventType::Accepted)
        .map(|e| (e.agent.as_deref().unwrap_or_default().to_owned(), e.attempt))
        .collect();
    assert_eq!(
        accepted,
        [
            ("quick".to_owned(), Some(1)),
            ("quick".to_owned(), Some(2)),
            ("slow".to_owned(), Some(1)),
            ("eager".to_owned(), Some(1))
        ]
    );
    for pair in restored.windows(2) {
        assert!(pair[0].at <= pair[1].at, "{restored:#?}");
        if pair[0].kind == EventType::Accepted {
            assert_eq!(pair[0].envelope, pair[1].envelope, "{restored:#?}");
        }
    }
    // `baton watch` shows them too.
    let session = task.session.to_string();
    let watch = tokio::task::block_in_place(|| system.baton(&["watch", &session]).output())?;
    let shown = String::from_utf8_lossy(&watch.stdout);
    assert_eq!(shown.matches("accepted").count(), 4, "{shown}");
    Ok(())
}

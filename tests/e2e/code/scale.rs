//! A Python agent at scale and under bad input: a 10 MB task, a stray
//! `print()`, a thousand tasks in flight on one program, and a program
//! that cannot start.

use std::collections::BTreeSet;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType, Wire as _};

use super::{Coder, output, shown};
use crate::util::kinds;

#[tokio::test(flavor = "multi_thread")]
async fn a_ten_megabyte_task_and_a_stray_print_reach_the_handler_intact() -> anyhow::Result<()> {
    let mut t = Coder::start("echo", &[], "").await?;
    t.worker("w1").await?;
    let text = "x".repeat(10_000_000);
    let task = t.send(&text).await?;
    let (_, end) = t.completed(&task).await?;
    let end = &end;
    let answer = output(end);
    assert_eq!(answer["length"], 10_000_000, "{answer}");
    assert_eq!(answer["session"], task.session.to_string());
    // The handler's print went to the log, not into the protocol.
    let log = t.system.process("w1").stderr();
    assert!(log.contains("a stray print from the handler"), "{log}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_tasks_in_flight_on_one_program_each_end_once() -> anyhow::Result<()> {
    const TASKS: usize = 1000;
    let mut t = Coder::start("echo", &[("ECHO_DELAY_S", "0.5")], "").await?;
    let spec = std::fs::read_to_string(&t.spec)?.replace("concurrency = 64", "concurrency = 1000");
    std::fs::write(&t.spec, spec)?;
    t.worker("w1").await?;
    let agent = AgentName::new("coder")?;
    let tasks: Vec<Envelope> = (0..TASKS)
        .map(|n| Envelope::task(format!("task {n}")))
        .collect();
    for task in &tasks {
        t.system.client.submit_to(&agent, task).await?;
    }
    let sessions = tasks.iter().map(|task| task.session).collect();
    let ended = t
        .system
        .ended_sessions(sessions, Duration::from_secs(120))
        .await?;
    assert_eq!(ended.len(), TASKS);
    let mut pids = BTreeSet::new();
    for (session, events) in &ended {
        let end = events.last().expect("an end");
        assert_eq!(
            end.kind,
            EventType::Completed,
            "{session}: {:?}",
            kinds(events)
        );
        assert_eq!(output(end)["session"], session.to_string());
        pids.insert(output(end)["pid"].to_string());
    }
    assert_eq!(pids.len(), 1, "one program answered all: {pids:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = t.system.events_by_session().await?;
    let doubled = (tasks.iter())
        .filter(|task| {
            let ends = stored.get(&task.session).into_iter().flatten();
            ends.filter(|e| e.kind.is_terminal()).count() != 1
        })
        .count();
    assert_eq!(doubled, 0, "every session ended exactly once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_that_exits_at_start_is_reported_with_its_stderr_and_not_restarted_in_a_loop()
-> anyhow::Result<()> {
    let mut t = Coder::start("echo", &[], "").await?;
    let spec = std::fs::read_to_string(&t.spec)?;
    let failing = "command = [\"python3\", \"-c\", \"import sys; sys.stderr.write('cannot load the model weights\\\\n'); sys.exit(3)\"]";
    let spec: String = (spec.lines())
        .map(|line| {
            if line.starts_with("command = ") {
                failing
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&t.spec, spec)?;
    t.worker("w1").await?;
    let task = t.send("hello").await?;
    let events = t.end(&task).await?;
    let end = events.last().expect("an end");
    assert_eq!(end.kind, EventType::Failed, "{:?}", kinds(&events));
    let detail = end.detail.clone().unwrap_or_default();
    let log = t.system.process("w1").stderr();
    assert!(
        detail.contains("cannot load the model weights"),
        "{detail} {log}"
    );
    // Four attempts, each a start; the later ones after a growing pause.
    let log = t.system.process("w1").stderr();
    let starts = log.matches("persistent exec program started").count();
    assert_eq!(starts, 4, "{log}");
    assert!(log.contains("ended soon after it started"), "{log}");
    Ok(())
}

/// The session's events as stored, one per message, not restored: each
/// message's type and how many steps' events it carries.
async fn stored_as_is(t: &Coder, session: uuid::Uuid) -> anyhow::Result<Vec<(String, usize)>> {
    let js = async_nats::jetstream::new(t.system.nats.clone());
    let stream = js.get_stream("BATON_EVENTS").await?;
    let mut stored = Vec::new();
    for seq in 1..=stream.get_info().await?.state.last_sequence {
        let Ok(message) = stream.get_raw_message(seq).await else {
            continue;
        };
        if message.subject.as_str() == format!("baton.events.{session}") {
            let event = baton_proto::Event::from_msgpack(&message.payload)?;
            stored.push((event.kind.to_string(), event.steps.len()));
        }
    }
    Ok(stored)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_short_hops_steps_ride_in_its_next_event_and_a_long_hops_are_stored_each()
-> anyhow::Result<()> {
    for (within, folded) in [("60000", true), ("0", false)] {
        let mut t = Coder::start("steps", &[], "").await?;
        let spec = t.spec.clone();
        let flags = ["--no-registry", "--accepted-after-ms", within];
        t.system.spec_worker("w1", &spec, &flags).await?;
        let task = t.send("order ABC-123").await?;
        let (events, _) = t.completed(&task).await?;
        // A reader sees both steps, in order, before the outcome either way.
        assert_eq!(shown(&events), ["step:prepare ok", "step:charge ok"]);
        let at = |kind: EventType| events.iter().position(|e| e.kind == kind);
        assert!(
            at(EventType::ToolCalled) < at(EventType::Completed),
            "{:?}",
            kinds(&events)
        );
        let stored = stored_as_is(&t, task.session).await?;
        let own = stored
            .iter()
            .filter(|(kind, _)| kind == "tool_called")
            .count();
        let carried: usize = stored.iter().map(|(_, steps)| steps).sum();
        if folded {
            // One stored message fewer a step: both ride in `completed`.
            assert_eq!((own, carried), (0, 2), "{stored:?}");
            assert!(stored.contains(&("completed".to_owned(), 2)), "{stored:?}");
            // The Python client of proto-schemas/ restores them too.
            let run = (t.system).python_client(&["--to", "coder", "--direct", "order XYZ-9"])?;
            let said = String::from_utf8_lossy(&run.stdout);
            let shown: Vec<&str> = (said.lines())
                .filter(|line| line.contains("tool_called"))
                .collect();
            assert_eq!(shown.len(), 2, "{said}");
            assert!(shown[0].contains("step:prepare ok in"), "{said}");
            assert!(shown[1].contains("step:charge ok in"), "{said}");
        } else {
            assert_eq!((own, carried), (2, 0), "{stored:?}");
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_held_early_is_stored_before_a_later_one_of_a_hop_that_grew_long()
-> anyhow::Result<()> {
    let mut t = Coder::start("steps", &[], "").await?;
    let pause = t.pausing()?;
    std::fs::remove_file(&pause)?;
    let spec = t.spec.clone();
    let flags = ["--no-registry", "--accepted-after-ms", "2000"];
    t.system.spec_worker("w1", &spec, &flags).await?;
    // The program is started, so the next hop's first step is quick.
    let warm = t.send("warm up").await?;
    t.completed(&warm).await?;
    std::fs::write(&pause, "")?;
    let task = t.send("order ABC-123").await?;
    t.reached("charge:reached", 1).await?;
    // `prepare` ended early and is held; `charge` ends after the hop's
    // first 2 s, so it is stored at once, and `prepare` before it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    std::fs::remove_file(&pause)?;
    let (events, _) = t.completed(&task).await?;
    assert_eq!(shown(&events), ["step:prepare ok", "step:charge ok"]);
    let stored = stored_as_is(&t, task.session).await?;
    let own = stored
        .iter()
        .filter(|(kind, _)| kind == "tool_called")
        .count();
    assert_eq!(own, 2, "{stored:?}");
    Ok(())
}

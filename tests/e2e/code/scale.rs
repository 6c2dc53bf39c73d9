//! A Python agent at scale and under bad input: a 10 MB task, a stray
//! `print()`, a thousand tasks in flight on one program, and a program
//! that cannot start.

use std::collections::BTreeSet;
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};

use super::{Coder, output};
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

//! Deadlines hold while the agent runs: the run is cancelled at the
//! deadline (an exec program is killed) and the session ends with
//! `deadline_exceeded`, whatever the agent would have decided.

use std::time::Duration;

use baton_proto::{Envelope, EventType, now_ms};
use baton_testkit::eventually;

use crate::util::{System, kinds};

const SLOW: &str = r#"
import json, os, sys, time
json.load(sys.stdin)
with open(os.environ["PID_FILE"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
print(json.dumps({"output": "too late"}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_running_past_the_deadline_is_cancelled_and_the_session_fails()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("slow.py"), SLOW)?;
    let pid_file = dir.path().join("pid");
    std::fs::write(
        dir.path().join("slow.toml"),
        format!(
            "name = \"slow\"\nkind = \"exec\"\ntimeout_ms = 120000\n[exec]\ncommand = [\"python3\", \"slow.py\"]\n[exec.env]\nPID_FILE = {:?}\n",
            pid_file.display().to_string()
        ),
    )?;
    system
        .spec_worker("slow", &dir.path().join("slow.toml"), &["--no-registry"])
        .await?;
    let deadline = now_ms() + 2_000;
    let task = Envelope::task("take your time").with_deadline(deadline);
    let events = system.run("slow", &task).await?;
    assert_eq!(
        kinds(&events),
        ["accepted", "dead_lettered", "failed"],
        "the agent's late answer is not used"
    );
    let failed = events.last().unwrap();
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    // It ended at the deadline, not when the agent would have answered (60 s).
    assert!(failed.at >= deadline, "{} before {deadline}", failed.at);
    assert!(
        failed.at < deadline + 10_000,
        "ended {} ms after the deadline",
        failed.at - deadline
    );
    // The program was killed.
    let pid = std::fs::read_to_string(&pid_file)?;
    eventually(Duration::from_secs(10), || {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
        std::future::ready(if alive {
            Err(format!("exec program {pid} still runs"))
        } else {
            Ok(())
        })
    })
    .await?;
    assert_eq!(events[0].kind, EventType::Accepted);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_routers_default_deadline_ends_sessions_that_set_none() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .router(&["--no-registry", "--default-deadline-ms", "1500"])
        .await?;
    system
        .relay("p1", "plodder", &["--work-ms", "30000", "--no-fallback"])
        .await?;
    let task = Envelope::task("no deadline of my own")
        .with_to(baton_proto::AgentName::from_static("plodder"));
    system.client.submit(&task).await?;
    let events = system
        .session_events(task.session, Duration::from_secs(20))
        .await?;
    let failed = events.last().unwrap();
    assert_eq!(failed.kind, EventType::Failed, "{:?}", kinds(&events));
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    Ok(())
}

/// The session's terminal events, once nothing more can arrive.
async fn terminal_events(
    system: &System,
    session: uuid::Uuid,
) -> anyhow::Result<Vec<baton_proto::Event>> {
    system.settled().await?;
    Ok(system
        .stored_events(session)
        .await?
        .into_iter()
        .filter(|e| e.kind.is_terminal())
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_waiting_in_a_queue_fails_at_its_deadline_and_only_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    system.relay("s1", "sleepy", &["--no-fallback"]).await?;
    system.process("s1").terminate();
    let deadline = now_ms() + 1_500;
    let task = Envelope::task("nobody is pulling").with_deadline(deadline);
    system
        .client
        .submit_to(&baton_proto::AgentName::new("sleepy")?, &task)
        .await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(kinds(&events), ["failed"]);
    let failed = &events[0];
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    assert!(failed.at >= deadline);
    assert!(
        failed
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("still queued"),
        "{failed:?}"
    );
    // The pool comes back and takes the task: dead-lettered, and the
    // session does not end a second time.
    system.relay("s2", "sleepy", &["--no-fallback"]).await?;
    let ends = terminal_events(&system, task.session).await?;
    assert_eq!(ends.len(), 1, "{:?}", kinds(&ends));
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.as_str(), "deadline_exceeded");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_join_waiting_past_the_deadline_ends_the_session_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    system
        .relay("b1", "boss", &["--delegate", "slowpoke", "--no-fallback"])
        .await?;
    system
        .relay("p1", "slowpoke", &["--work-ms", "30000", "--no-fallback"])
        .await?;
    let deadline = now_ms() + 2_000;
    let task = Envelope::task("delegate and wait").with_deadline(deadline);
    let events = system.run("boss", &task).await?;
    let failed = events.last().unwrap();
    assert_eq!(failed.kind, EventType::Failed, "{:?}", kinds(&events));
    assert_eq!(
        failed.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    assert!(failed.at < deadline + 10_000);
    assert_eq!(terminal_events(&system, task.session).await?.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_waiting_for_a_person_fails_at_its_deadline() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    system.human_support().await?;
    let deadline = now_ms() + 1_500;
    let task = Envelope::task("I need a person, quickly").with_deadline(deadline);
    let events = system.run("human_support", &task).await?;
    assert_eq!(kinds(&events), ["accepted", "waiting", "failed"]);
    assert_eq!(
        events[2].reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    // An answer after the deadline is refused: the session stays ended once.
    let id = events[1].envelope.unwrap().to_string();
    let reply = system
        .baton(&["inbox", "reply", &id, "sorry, late"])
        .output()?;
    let stderr = String::from_utf8_lossy(&reply.stderr);
    assert!(!reply.status.success());
    assert!(stderr.contains("passed its deadline"), "{stderr}");
    assert_eq!(terminal_events(&system, task.session).await?.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_deadline_timer_is_dead_lettered() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    system
        .publish_raw("baton.agent._deadline", b"not a timer".to_vec())
        .await?;
    let dead = eventually(Duration::from_secs(20), || async {
        let dead = system.client.dead_letters().await?;
        anyhow::ensure!(!dead.is_empty(), "no dead letter yet");
        Ok(dead)
    })
    .await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].agent, "ingress");
    assert_eq!(dead[0].reason.as_str(), "malformed");
    assert_eq!(&dead[0].payload[..], b"not a timer");
    system.settled().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compact_handoff_names_only_its_hop_and_a_deadline_end_still_names_the_whole_path()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--no-registry"]).await?;
    let compact = ["--no-fallback"];
    system
        .relay("a1", "alpha", &[&compact[..], &["--next", "beta"]].concat())
        .await?;
    system
        .relay("b1", "beta", &[&compact[..], &["--next", "gamma"]].concat())
        .await?;
    // Gamma's pool is down: the task waits in its queue until the deadline.
    system.relay("c1", "gamma", &compact).await?;
    system.process("c1").terminate();
    let deadline = now_ms() + 2_000;
    let task = Envelope::task("through two hops").with_deadline(deadline);
    system
        .client
        .submit_to(&baton_proto::AgentName::new("alpha")?, &task)
        .await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let agents = |event: &baton_proto::Event| -> Vec<String> {
        event.path.iter().map(|hop| hop.agent.to_string()).collect()
    };
    let handoffs: Vec<&baton_proto::Event> = (events.iter())
        .filter(|event| event.kind == EventType::Handoff)
        .collect();
    assert_eq!(handoffs.len(), 2, "{:?}", kinds(&events));
    // Beta's handoff names its own hop, after the one before.
    assert_eq!(
        (agents(handoffs[1]), handoffs[1].path_from),
        (vec!["beta".to_owned()], Some(1))
    );
    let end = events.last().expect("an end");
    assert_eq!(
        end.reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    assert_eq!(agents(end), ["alpha", "beta"], "{end:?}");
    assert_eq!(end.path_from, None);
    Ok(())
}

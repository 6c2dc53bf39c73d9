//! `baton cancel`: a session ends once, as `failed`/`cancelled`; the agent
//! running it is stopped, its later messages are dropped unrun, the deadline
//! watch adds nothing, and a task waiting for a person leaves the inbox.

use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType, Reason, now_ms};

use crate::util::{System, kinds};

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |stat| stat.split_whitespace().nth(2) == Some("Z"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_stops_the_running_agent_and_ends_the_session_once() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("pid");
    let spec = dir.path().join("slow.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"slow\"\nkind = \"exec\"\ntimeout_ms = 60000\n\n[exec]\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; exec sleep 60\"]\n",
            pidfile.display()
        ),
    )?;
    system
        .spec_worker("slow", &spec, &["--no-registry"])
        .await?;
    system.relay("relay", "relay", &[]).await?;
    // The router holds the deadline timer, and would fail the session at its deadline.
    system.router(&[]).await?;

    let mut task = Envelope::task("take your time");
    task.deadline = Some(now_ms() + 4_000);
    system
        .client
        .submit_to(&AgentName::new("slow")?, &task)
        .await?;
    let pid = baton_testkit::eventually(Duration::from_secs(10), || {
        std::future::ready(
            std::fs::read_to_string(&pidfile)
                .ok()
                .map(|pid| pid.trim().to_owned())
                .filter(|pid| !pid.is_empty())
                .ok_or("the program has not started"),
        )
    })
    .await?;
    assert!(!gone(&pid), "the program runs");

    let out = system.baton_stdout(&[
        "cancel",
        &task.session.to_string(),
        "--detail",
        "user gave up",
    ])?;
    assert!(out.contains("cancelled"), "{out}");
    baton_testkit::eventually(Duration::from_secs(5), || {
        std::future::ready(if gone(&pid) {
            Ok(())
        } else {
            Err("still running")
        })
    })
    .await?;

    // A message of the cancelled session that arrives later is dropped unrun,
    // while another session on the same agent type completes.
    let mut late = task.clone().resent(
        uuid::Uuid::new_v4(),
        baton_proto::Kind::Handoff,
        baton_proto::AgentName::from_static("relay"),
    );
    late.deadline = None;
    let relay = AgentName::new("relay")?;
    system.client.submit_to(&relay, &late).await?;
    let control = Envelope::task("other session");
    let events = system.run("relay", &control).await?;
    assert_eq!(
        events.last().map(|e| e.kind.clone()),
        Some(EventType::Completed)
    );

    // Past the deadline and its watch's grace: still the one terminal event.
    tokio::time::sleep(Duration::from_millis(
        task.deadline.unwrap_or(0).saturating_sub(now_ms()) + 1_500,
    ))
    .await;
    system.settled().await?;
    let stored = system.stored_events(task.session).await?;
    let terminal: Vec<_> = stored.iter().filter(|e| e.kind.is_terminal()).collect();
    assert_eq!(terminal.len(), 1, "{:?}", kinds(&stored));
    assert_eq!(terminal[0].kind, EventType::Failed);
    assert_eq!(terminal[0].reason, Some(Reason::Cancelled));
    assert_eq!(terminal[0].detail.as_deref(), Some("user gave up"));
    assert_eq!(
        stored.last().map(|e| e.id),
        Some(terminal[0].id),
        "{:?}",
        kinds(&stored)
    );
    assert!(
        !stored.iter().any(|e| e.agent.as_deref() == Some("relay")),
        "the late message ran: {:?}",
        kinds(&stored)
    );

    // Cancelling again changes nothing and says so.
    let again = system
        .baton(&["cancel", &task.session.to_string()])
        .output()?;
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("had ended already"));
    assert_eq!(
        system.stored_events(task.session).await?.len(),
        stored.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_session_leaves_the_inbox_and_cannot_be_answered() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.human_support().await?;
    let task = Envelope::task("a question for a person");
    system
        .client
        .submit_to(&AgentName::new("human_support")?, &task)
        .await?;
    system.waiting(task.session).await?;
    let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
    assert!(listed.contains(&task.id.to_string()), "{listed}");

    system.baton_stdout(&["cancel", &task.session.to_string()])?;
    let reply = system
        .baton(&["inbox", "reply", &task.id.to_string(), "too late"])
        .output()?;
    assert!(!reply.status.success());
    let stderr = String::from_utf8_lossy(&reply.stderr);
    assert!(stderr.contains("was cancelled"), "{stderr}");
    let listed = system.baton_stdout(&["inbox", "ls", "--json"])?;
    assert!(!listed.contains(&task.id.to_string()), "{listed}");

    let stored = system.stored_events(task.session).await?;
    assert_eq!(
        kinds(&stored).last().map(String::as_str),
        Some("failed"),
        "{:?}",
        kinds(&stored)
    );
    assert_eq!(stored.iter().filter(|e| e.kind.is_terminal()).count(), 1);
    Ok(())
}

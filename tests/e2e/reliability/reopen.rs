//! Replays re-open sessions, and the CLI says what a fresh server or an
//! unknown session has: every session ends, and every command answers.

use std::time::Duration;

use baton_proto::{Envelope, EventType};

use crate::util::{System, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_dead_letter_reopens_its_session_and_the_new_end_wins() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system
        .relay("f1", "fragile", &["--fatal", "--no-fallback"])
        .await?;
    let task = Envelope::task("try again later");
    let first = system.run("fragile", &task).await?;
    assert_eq!(kinds(&first), ["accepted", "dead_lettered", "failed"]);
    // The bug is fixed: the agent type comes back without --fatal.
    system.process("f1").terminate();
    system.relay("f2", "fragile", &["--no-fallback"]).await?;
    let dead = system.client.dead_letters().await?;
    assert_eq!(dead.len(), 1);
    let seq = dead[0].seq.to_string();
    let replay = system.baton(&["dlq", "replay", &seq]).output()?;
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );

    // `wait` follows the re-opened session to its new end.
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    // `watch` too: it prints the old end, the re-opening and the new end, and exits 0.
    let watch = system
        .baton(&["watch", &task.session.to_string(), "--json"])
        .output()?;
    assert!(watch.status.success());
    let watched: Vec<String> = String::from_utf8_lossy(&watch.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["type"].to_string())
        .collect();
    assert_eq!(
        watched,
        [
            "\"accepted\"",
            "\"dead_lettered\"",
            "\"failed\"",
            "\"reopened\"",
            "\"accepted\"",
            "\"completed\""
        ]
    );
    assert!(
        system.client.dead_letters().await?.is_empty(),
        "replay removed it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deadline_exceeded_letter_needs_more_time_to_be_replayed() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.relay("l1", "late", &["--no-fallback"]).await?;
    let task = Envelope::task("too late").with_deadline(baton_proto::now_ms() - 1);
    let events = system.run("late", &task).await?;
    assert_eq!(
        events.last().unwrap().reason.as_ref().map(|r| r.as_str()),
        Some("deadline_exceeded")
    );
    let seq = system.client.dead_letters().await?[0].seq.to_string();
    let refused = system.baton(&["dlq", "replay", &seq]).output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("--extend-deadline"), "{stderr}");
    let replay = system
        .baton(&["dlq", "replay", &seq, "--extend-deadline", "60000"])
        .output()?;
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let end = system
        .client
        .wait(task.session, Duration::from_secs(30))
        .await?;
    assert_eq!(end.kind, EventType::Completed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_server_and_an_unknown_session_get_plain_answers() -> anyhow::Result<()> {
    let system = System::start().await?;
    let dlq = system.baton(&["dlq", "ls"]).output()?;
    assert!(
        dlq.status.success(),
        "{}",
        String::from_utf8_lossy(&dlq.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&dlq.stdout).trim(),
        "no dead letters"
    );
    let replay = system.baton(&["dlq", "replay", "7"]).output()?;
    let stderr = String::from_utf8_lossy(&replay.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        errors,
        ["error: no dead letter with sequence 7: see `baton dlq ls`"],
        "the error, once: {stderr}"
    );
    let watch = system
        .baton(&[
            "watch",
            "0b7e4d1e-1111-4222-8333-444455556666",
            "--start-timeout-secs",
            "1",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&watch.stderr);
    assert!(!watch.status.success());
    assert!(stderr.contains("no such session"), "{stderr}");
    // An empty variable is unset: the URL flag still wins, the empty prefix is the default.
    let empty = system
        .baton(&["dlq", "ls"])
        .env("BATON_PREFIX", "")
        .env("NATS_CREDS", "")
        .output()?;
    assert!(
        empty.status.success(),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    // Each cause is said once.
    let refused = system
        .baton(&["dlq", "ls"])
        .arg("--nats-url")
        .arg("nats://127.0.0.1:1")
        .output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn send_wait_says_when_a_person_must_answer_and_exits_with_3() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.human_support().await?;
    let output = system
        .baton(&[
            "send",
            "--to",
            "human_support",
            "--direct",
            "--wait",
            "I need a person",
        ])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("waiting for a person"), "{stdout}");
    assert!(stdout.contains("baton inbox reply"), "{stdout}");
    Ok(())
}

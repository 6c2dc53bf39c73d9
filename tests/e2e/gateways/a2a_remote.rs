//! `kind = "a2a"` agents against a remote agent built with the official A2A
//! Python SDK's server (examples/a2a/remote_agent.py): a handoff target, a
//! parallel delegate, input-required handed to a person, and a worker killed
//! mid-task whose redelivery follows the same remote task.

use std::time::Duration;

use anyhow::Context as _;

use baton_proto::{AgentName, Envelope, EventType};

use crate::util::{System, agents, example};

/// Starts the example remote agent (`flags`, `env`) as process `label`; its URL.
async fn remote(
    system: &mut System,
    label: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> anyhow::Result<String> {
    let mut command = std::process::Command::new("python3");
    command
        .arg(example("a2a/remote_agent.py"))
        .args(["--port", "0"])
        .args(flags);
    for (key, value) in env {
        command.env(key, value);
    }
    system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
    let process = system.process(label);
    let url = baton_testkit::eventually(Duration::from_secs(30), || {
        let out = process.stdout();
        let found = out
            .lines()
            .find_map(|line| line.strip_prefix("listening on "))
            .map(str::to_owned);
        std::future::ready(found.ok_or_else(|| {
            let err = process.stderr();
            anyhow::anyhow!("the remote agent has not started: {err}")
        }))
    })
    .await?;
    Ok(url)
}

/// A `research` spec for the remote at `url`, with extra `[a2a]` lines.
fn spec(dir: &std::path::Path, url: &str, extra: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = dir.join("research.toml");
    std::fs::write(
        &path,
        format!(
            "name = \"research\"\nkind = \"a2a\"\ntimeout_ms = 60000\nfallback = \"human_support\"\n\n[retry]\nmax_attempts = 3\nmin_backoff_ms = 50\nmax_backoff_ms = 200\n\n[a2a]\nurl = {url:?}\npoll_ms = 100\n{extra}\n"
        ),
    )?;
    Ok(path)
}

/// Starts a worker of `spec` as `label` with the remote's token in its environment.
async fn with_token(
    system: &mut System,
    label: &str,
    spec: &std::path::Path,
    flags: &[&str],
) -> anyhow::Result<()> {
    with_env(
        system,
        label,
        spec,
        flags,
        ("RESEARCH_TOKEN", "remote-s3cret"),
    )
    .await
}

/// Starts a worker of `spec` as `label` with `var` in its environment.
async fn with_env(
    system: &mut System,
    label: &str,
    spec: &std::path::Path,
    flags: &[&str],
    var: (&str, &str),
) -> anyhow::Result<()> {
    let spec = spec.to_string_lossy().into_owned();
    let mut args = vec!["worker", "--spec", &spec, "--instance", label];
    args.extend_from_slice(flags);
    let mut command = system.baton(&args);
    command.env(var.0, var.1);
    system.adopt(label, baton_testkit::ChildProcess::spawn(command, label)?);
    system
        .wait_log(label, "worker started", Duration::from_secs(30))
        .await
}

fn output(events: &[baton_proto::Event]) -> String {
    let last = events.last().expect("a terminal event");
    assert_eq!(last.kind, EventType::Completed, "{events:#?}");
    match last.output.as_ref() {
        Some(rmpv::Value::String(text)) => text.as_str().unwrap_or_default().to_owned(),
        other => panic!("not a text answer: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_a2a_agent_is_a_handoff_target_and_a_parallel_delegate() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The remote wants an API key; the spec takes it from RESEARCH_KEY.
    let url = remote(&mut system, "remote", &[], &[("REMOTE_API_KEY", "k-123")]).await?;
    let dir = tempfile::tempdir()?;
    let research = spec(dir.path(), &url, "api_key_env = \"RESEARCH_KEY\"")?;
    let flags = ["--no-registry"];
    with_env(
        &mut system,
        "research",
        &research,
        &flags,
        ("RESEARCH_KEY", "k-123"),
    )
    .await?;
    let front = example("a2a/front.toml");
    system
        .spec_worker("front", &front, &["--no-registry"])
        .await?;
    system.human_support().await?;

    // A handoff: front -> research, answered by the remote agent (streamed).
    let events = system
        .run("front", &Envelope::task("Tell me about tides"))
        .await?;
    assert_eq!(
        output(&events),
        "research on Tell me about tides: 3 sources agree"
    );
    let last = events.last().expect("an end");
    assert_eq!(agents(&last.path), ["front", "research"]);

    // A parallel delegation: two remote tasks, joined in order.
    let events = system
        .run("front", &Envelope::task("compare tides and moons"))
        .await?;
    assert_eq!(
        output(&events),
        "research on tides: 3 sources agree | research on moons: 3 sources agree"
    );
    let delegated = events
        .iter()
        .filter(|e| e.kind == EventType::Delegated)
        .count();
    assert_eq!(delegated, 2, "{:?}", crate::util::kinds(&events));

    // Input required: the remote's question goes to a person.
    let task = Envelope::task("Which region has the best tides?");
    system
        .client
        .submit_to(&AgentName::new("research")?, &task)
        .await?;
    let waiting = system.waiting(task.session).await?;
    assert_eq!(waiting.agent.as_deref(), Some("human_support"));
    let asked = system.baton_stdout(&[
        "inbox",
        "show",
        &waiting.envelope.unwrap_or_default().to_string(),
    ])?;
    assert!(
        asked.contains("Which region do you mean: north or south?"),
        "{asked}"
    );
    assert!(asked.contains("input_required"), "{asked}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redelivered_task_follows_its_remote_task_instead_of_starting_another()
-> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("remote.log");
    let log_text = log.to_string_lossy().into_owned();
    let url = remote(
        &mut system,
        "remote",
        &["--no-streaming"],
        &[
            ("REMOTE_LOG", &log_text),
            ("REMOTE_DELAY_MS", "5000"),
            ("REMOTE_TOKEN", "remote-s3cret"),
        ],
    )
    .await?;
    let research = spec(
        dir.path(),
        &url,
        "streaming = false\ntoken_env = \"RESEARCH_TOKEN\"",
    )?;
    let flags = ["--no-registry", "--ack-wait-secs", "2"];
    // Without its token the worker cannot start: the variable is named.
    let unset = system
        .baton(&["worker", "--spec", &research.to_string_lossy()])
        .output()?;
    assert!(!unset.status.success());
    assert!(String::from_utf8_lossy(&unset.stderr).contains("RESEARCH_TOKEN"));
    with_token(&mut system, "research", &research, &flags).await?;

    let task = Envelope::task("slow tides");
    system
        .client
        .submit_to(&AgentName::new("research")?, &task)
        .await?;
    baton_testkit::eventually(Duration::from_secs(20), || {
        let started = std::fs::read_to_string(&log).unwrap_or_default();
        std::future::ready(if started.lines().count() == 1 {
            Ok(())
        } else {
            Err("the remote task has not started")
        })
    })
    .await?;
    system.process("research").kill9();
    with_token(&mut system, "research-2", &research, &flags).await?;

    let events = system
        .session_events(task.session, Duration::from_secs(40))
        .await?;
    assert_eq!(output(&events), "research on slow tides: 3 sources agree");
    // The remote task took longer than the ack wait (5 s against 2 s), and
    // progress kept the message: the delivery after the kill is the last.
    // (The killed attempt's `accepted` may not be stored: it is folded into
    // the hop's next event when the hop is quick, and the kill came first.)
    let attempts: Vec<u32> = events
        .iter()
        .filter(|e| e.kind == EventType::Accepted)
        .filter_map(|e| e.attempt)
        .collect();
    assert_eq!(
        attempts.last(),
        Some(&2),
        "{:?}",
        crate::util::kinds(&events)
    );
    assert!(attempts.iter().all(|a| *a <= 2), "{attempts:?}");
    let started = std::fs::read_to_string(&log)?;
    assert_eq!(
        started.lines().collect::<Vec<_>>(),
        [task.id.to_string()],
        "one remote task, in the envelope's context"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_session_cancels_its_remote_task() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("remote.log");
    let log_text = log.to_string_lossy().into_owned();
    let env = [
        ("REMOTE_LOG", log_text.as_str()),
        ("REMOTE_DELAY_MS", "30000"),
    ];
    let url = remote(&mut system, "remote", &[], &env).await?;
    let research = spec(dir.path(), &url, "")?;
    system
        .spec_worker("research", &research, &["--no-registry"])
        .await?;

    let task = Envelope::task("a long study");
    system
        .client
        .submit_to(&AgentName::new("research")?, &task)
        .await?;
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    baton_testkit::eventually(Duration::from_secs(20), || {
        std::future::ready(if read().lines().count() == 1 {
            Ok(())
        } else {
            Err("not started")
        })
    })
    .await?;
    system.baton_stdout(&["cancel", &task.session.to_string()])?;
    let lines = baton_testkit::eventually(Duration::from_secs(20), || {
        let lines: Vec<String> = read().lines().map(str::to_owned).collect();
        std::future::ready(if lines.len() == 2 {
            Ok(lines)
        } else {
            Err("not cancelled remotely")
        })
    })
    .await
    .with_context(|| {
        format!(
            "worker:\n{}\nremote:\n{}",
            system.process("research").stderr(),
            system.process("remote").stderr()
        )
    })?;
    assert_eq!(
        lines,
        [task.id.to_string(), format!("cancelled {}", task.id)]
    );
    Ok(())
}

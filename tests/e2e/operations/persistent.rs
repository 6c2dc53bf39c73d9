//! Persistent exec agents: one program per worker, many tasks in flight over
//! newline-delimited JSON; killed with SIGKILL mid-flight, it loses nothing.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use baton_proto::{AgentName, Envelope, EventType};

use crate::util::{System, example, field};

/// A spec for the example `lookup.py` (or `lookup.mjs`) under `name`, with
/// `env` for the program.
fn spec(
    dir: &std::path::Path,
    name: &str,
    program: &[&str],
    env: &[(&str, &str)],
) -> std::path::PathBuf {
    let script = example(&format!("persistent/{}", program[1]));
    let command = format!("[{:?}, {:?}]", program[0], script.to_string_lossy());
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    let text = format!(
        "name = {name:?}\nkind = \"exec\"\nconcurrency = 16\ntimeout_ms = 10000\n\n[retry]\nmax_attempts = 5\nmin_backoff_ms = 50\nmax_backoff_ms = 200\n\n[exec]\ncommand = {command}\nmode = \"persistent\"\n\n[exec.env]\n{}\n",
        env.join("\n")
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_program_killed_mid_flight_loses_and_doubles_no_task() -> anyhow::Result<()> {
    const TASKS: usize = 30;
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    let pidfile = dir.path().join("pid");
    let pidfile_text = pidfile.to_string_lossy().into_owned();
    let spec = spec(
        dir.path(),
        "lookup",
        &["python3", "lookup.py"],
        &[
            ("LOOKUP_DELAY_MS", "400"),
            ("LOOKUP_PIDFILE", &pidfile_text),
        ],
    );
    system
        .spec_worker("lookup", &spec, &["--no-registry"])
        .await?;
    let agent = AgentName::new("lookup")?;
    let tasks: Vec<Envelope> = (0..TASKS)
        .map(|n| Envelope::task(format!("where is ABC-123? ({n})")))
        .collect();
    for task in &tasks {
        system.client.submit_to(&agent, task).await?;
    }
    // The program starts with the first task; 16 are in flight for 400 ms.
    let first = baton_testkit::eventually(Duration::from_secs(10), || {
        std::future::ready(
            std::fs::read_to_string(&pidfile)
                .ok()
                .filter(|pid| !pid.trim().is_empty())
                .ok_or("the program has not started yet"),
        )
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", first.trim()])
        .status()?;
    assert!(killed.success());

    let mut ends: HashMap<uuid::Uuid, Vec<EventType>> = HashMap::new();
    let mut pids = BTreeSet::new();
    let mut retried = 0;
    for task in &tasks {
        let events = system
            .session_events(task.session, Duration::from_secs(30))
            .await?;
        retried += usize::from(events.iter().any(|e| e.kind == EventType::Retrying));
        let end = events.last().expect("a terminal event");
        if let Some(pid) = end.output.as_ref().and_then(|o| field(o, "pid")) {
            pids.insert(pid.to_string());
        }
        ends.entry(task.session).or_default().push(end.kind.clone());
    }
    // Give a doubled ending time to show up, then count every stored terminal event.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = system.events_by_session().await?;
    let mut completed = 0;
    for task in &tasks {
        let terminal: Vec<_> = stored
            .get(&task.session)
            .into_iter()
            .flatten()
            .filter(|e| e.kind.is_terminal())
            .map(|e| e.kind.clone())
            .collect();
        assert_eq!(terminal, [EventType::Completed], "session {}", task.session);
        completed += 1;
    }
    assert_eq!(completed, TASKS, "none lost, none doubled");
    assert!(retried >= 1, "the tasks in flight at the kill were retried");
    assert!(
        !pids.is_empty() && !pids.contains(first.trim()),
        "the killed program {first} answered nothing; its restart answered all: {pids:?}"
    );
    let log = system.process("lookup").stderr();
    assert!(log.contains("start=2"), "{log}");
    assert!(system.client.dead_letters().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_and_node_examples_answer_many_tasks_from_one_process() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    for (name, program) in [
        ("lookup_py", ["python3", "lookup.py"]),
        ("lookup_node", ["node", "lookup.mjs"]),
    ] {
        let spec = spec(dir.path(), name, &program, &[("LOOKUP_DELAY_MS", "50")]);
        system.spec_worker(name, &spec, &["--no-registry"]).await?;
        let tasks: Vec<Envelope> = (0..8)
            .map(|n| Envelope::task(format!("is FLK-204 here yet? ({n})")))
            .collect();
        let agent = AgentName::new(name)?;
        for task in &tasks {
            system.client.submit_to(&agent, task).await?;
        }
        let mut pids = BTreeSet::new();
        for task in &tasks {
            let end = system
                .client
                .wait(task.session, Duration::from_secs(20))
                .await?;
            assert_eq!(end.kind, EventType::Completed, "{name}: {end:?}");
            let output = end.output.as_ref().expect("an answer");
            assert_eq!(
                field(output, "answer").and_then(|a| a.as_str()),
                Some("FLK-204 is delivered"),
                "{name}"
            );
            pids.insert(field(output, "pid").map(ToString::to_string));
        }
        assert_eq!(
            pids.len(),
            1,
            "{name}: one process served all 8 tasks: {pids:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exec_bench_runs_every_mode_and_the_package_and_reports_the_ratios()
-> anyhow::Result<()> {
    let system = System::start().await?;
    let stdout = system.baton_stdout(&[
        "bench",
        "--exec",
        "--tasks",
        "20",
        "--concurrency",
        "4",
        "--rounds",
        "1",
    ])?;
    let ratios = [
        "persistent / per_task",
        "package / persistent",
        "3 steps / persistent",
        "3 async steps / persistent",
        "µs per ctx call",
        "µs per async ctx call",
    ];
    let rows = [
        "per_task",
        "persistent",
        "package ",
        "package, 3 steps",
        "package, 3 async steps",
    ];
    for row in rows.iter().chain(&ratios) {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(row))
            .unwrap_or_else(|| panic!("no {row} row in:\n{stdout}"));
        // A ratio's line ends in its figure; a way's in its tasks/s,
        // ms/task and first task's ms.
        let figures: &[usize] = if ratios.contains(row) { &[0] } else { &[2, 0] };
        for &nth in figures {
            let figure: f64 = line
                .split_whitespace()
                .rev()
                .nth(nth)
                .and_then(|f| f.parse().ok())
                .unwrap_or_else(|| panic!("no figure in {line:?}"));
            assert!(
                figure.is_finite() && (figure > 0.0 || row.starts_with("µs per")),
                "{line}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_answer_fails_its_task_at_once_with_the_reason() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    let dir = tempfile::tempdir()?;
    // Answers with a misspelt field; the task's timeout (60 s) is far away.
    std::fs::write(
        dir.path().join("typo.py"),
        "import json, sys\nfor line in sys.stdin:\n    r = json.loads(line)\n    print(json.dumps({\"id\": r[\"id\"], \"reply\": {\"acton\": \"terminate\"}}), flush=True)\n",
    )?;
    let spec = dir.path().join("typo.toml");
    std::fs::write(
        &spec,
        "name = \"typo\"\nkind = \"exec\"\ntimeout_ms = 60000\n\n[exec]\ncommand = [\"python3\", \"typo.py\"]\nmode = \"persistent\"\n",
    )?;
    system
        .spec_worker("typo", &spec, &["--no-registry"])
        .await?;
    let task = Envelope::task("anything");
    system
        .client
        .submit_to(&AgentName::new("typo")?, &task)
        .await?;
    let events = system
        .session_events(task.session, Duration::from_secs(20))
        .await?;
    let end = events.last().expect("a terminal event");
    assert_eq!(end.kind, EventType::Failed);
    assert_eq!(end.reason.as_ref().map(|r| r.as_str()), Some("fatal"));
    let detail = end.detail.as_deref().unwrap_or_default();
    assert!(
        detail.contains("not an exec response") && detail.contains("acton"),
        "{detail}"
    );
    Ok(())
}

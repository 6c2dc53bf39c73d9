//! The `baton` command as people use it: the demo, send/watch, the NATS
//! environment conventions, and clear errors for bad input or configuration.

use anyhow::Context as _;
use async_nats::jetstream::stream;
use baton_proto::{Envelope, EventType};

use crate::util::{System, kinds};

#[tokio::test(flavor = "multi_thread")]
async fn baton_dev_runs_every_demo_case() -> anyhow::Result<()> {
    let output = tokio::task::block_in_place(|| {
        let mut command = std::process::Command::new(baton_testkit::baton_binary());
        command.arg("dev").env_remove("NATS_URL").output()
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for path in [
        "path:   general_enquiry -[knowledge_gap]-> refund",
        "path:   general_enquiry -[out_of_scope]-> order_management\n",
        "path:   general_enquiry -[out_of_scope]-> order_management -[tool_failure]-> advanced_order",
        "path:   general_enquiry -[user_escalation]-> human_support",
        "path:   general_enquiry -[out_of_scope]-> order_management -[loop_detected]-> human_support",
    ] {
        assert!(stdout.contains(path), "missing {path:?} in:\n{stdout}");
    }
    assert!(
        stdout
            .contains("order_management retrying: attempt 1 of 3 failed: order database timed out"),
        "{stdout}"
    );
    assert!(stdout.contains("refused, loop detected"), "{stdout}");
    assert_eq!(stdout.matches("  answer: ").count(), 5, "{stdout}");
    assert!(stdout.contains("0 dead letter(s)"), "{stdout}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn send_wait_and_watch_use_nats_url_from_the_environment() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    system.router(&["--default-agent", "front"]).await?;
    system.relay("f1", "front", &["--next", "back"]).await?;
    system.relay("b1", "back", &[]).await?;

    let output = tokio::task::block_in_place(|| {
        std::process::Command::new(baton_testkit::baton_binary())
            .args([
                "send",
                "--wait",
                "--var",
                "order_id=ABC-123",
                "--var",
                "count=3",
                "hello there",
            ])
            .env("NATS_URL", system.server.url())
            .output()
    })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("path:   front -[out_of_scope]-> back"),
        "{stdout}"
    );
    assert!(
        stdout.contains(r#""order_id":"ABC-123""#) && stdout.contains(r#""count":3"#),
        "{stdout}"
    );
    let session = stdout
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("session ")
        .to_owned();

    let watch = tokio::task::block_in_place(|| system.baton(&["watch", &session]).output())?;
    let lines = String::from_utf8_lossy(&watch.stdout);
    assert!(watch.status.success());
    let events: Vec<_> = lines.lines().collect();
    assert_eq!(events.len(), 4, "{lines}");
    assert!(events[0].ends_with("front accepted (attempt 1)"), "{lines}");
    assert!(
        events[1].ends_with("front handed off to back [out_of_scope]"),
        "{lines}"
    );
    assert!(events[3].contains("completed: "), "{lines}");

    let bad = tokio::task::block_in_place(|| system.baton(&["watch", "not-a-session"]).output())?;
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid session id"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_keeps_a_long_task_from_being_redelivered() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // The task runs 3.5 s against an ack_wait of 1 s: only progress keeps it ours.
    system
        .relay("l1", "long", &["--work-ms", "3500", "--ack-wait-secs", "1"])
        .await?;
    system
        .relay("l2", "long", &["--work-ms", "3500", "--ack-wait-secs", "1"])
        .await?;
    let task = Envelope::task("take your time");
    let events = system.run("long", &task).await?;
    assert_eq!(kinds(&events), ["accepted", "completed"]);
    system.settled().await?;
    let stored = system.stored_events(task.session).await?;
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.kind == EventType::Accepted)
            .count(),
        1,
        "{:?}",
        kinds(&stored)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conflicting_stream_is_reported_with_the_fix() -> anyhow::Result<()> {
    let system = System::start().await?;
    let js = async_nats::jetstream::new(system.nats.clone());
    js.create_stream(stream::Config {
        name: "BATON_TASKS".into(),
        subjects: vec!["baton.ingress".into(), "baton.agent.>".into()],
        retention: stream::RetentionPolicy::Limits,
        ..Default::default()
    })
    .await?;
    let output =
        tokio::task::block_in_place(|| system.baton(&["worker", "any", "--relay"]).output())?;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("stream BATON_TASKS exists with retention Limits"),
        "{stderr}"
    );
    assert!(stderr.contains("nats stream rm BATON_TASKS"), "{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_names_and_unreachable_servers_get_clear_errors() -> anyhow::Result<()> {
    let system = System::start().await?;
    let run = |args: &[&str]| tokio::task::block_in_place(|| system.baton(args).output());

    let unknown = run(&["worker", "wizard"])?;
    assert!(!unknown.status.success());
    let text = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        text.contains("unknown agent type \"wizard\"") && text.contains("--relay"),
        "{text}"
    );

    let invalid = run(&["worker", "Bad.Name", "--relay"])?;
    let text = String::from_utf8_lossy(&invalid.stderr);
    assert!(
        text.contains("invalid agent type name \"Bad.Name\"") && text.contains("a-z, 0-9"),
        "{text}"
    );

    let bad_var = run(&["send", "--var", "novalue", "hi"])?;
    assert!(String::from_utf8_lossy(&bad_var.stderr).contains("write KEY=VALUE"));

    let offline = tokio::task::block_in_place(|| {
        std::process::Command::new(baton_testkit::baton_binary())
            .args(["--nats-url", "nats://127.0.0.1:1", "send", "hi"])
            .output()
    })?;
    assert!(!offline.status.success());
    let text = String::from_utf8_lossy(&offline.stderr);
    assert!(
        text.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{text}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spec_is_honoured_whole_and_resolved_from_its_own_folder() -> anyhow::Result<()> {
    let mut system = System::start().await?;
    // Run from the spec's folder, named without a directory.
    let support = crate::util::example("support");
    let mut command = system.baton(&["worker", "--spec", "triage.toml", "--no-registry"]);
    command.current_dir(&support);
    system.adopt(
        "triage",
        baton_testkit::ChildProcess::spawn(command, "triage")?,
    );
    system
        .wait_log(
            "triage",
            "worker started",
            std::time::Duration::from_secs(30),
        )
        .await?;
    let events = system
        .run("triage", &Envelope::task("When are you open?"))
        .await?;
    assert_eq!(
        events.last().unwrap().kind,
        EventType::Completed,
        "{:?}",
        kinds(&events)
    );

    // The spec's max_delegation_depth (0: no delegation at all) is not
    // replaced by the command line's default of 4.
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("shallow.toml");
    std::fs::write(
        &spec,
        "name = \"shallow\"\nkind = \"chain\"\nmax_delegation_depth = 0\n[chain]\nsteps = [\"step\"]\n",
    )?;
    system.relay("s1", "step", &["--no-fallback"]).await?;
    system
        .spec_worker("shallow", &spec, &["--no-registry"])
        .await?;
    let events = system.run("shallow", &Envelope::task("go")).await?;
    let failed = events.last().unwrap();
    assert_eq!(failed.kind, EventType::Failed, "{:?}", kinds(&events));
    let detail = failed.detail.clone().unwrap_or_default();
    assert!(detail.contains("delegation depth limit 0"), "{detail}");

    // A flag that the spec decides is refused, naming both.
    let output = system
        .baton(&["worker", "--spec", "triage.toml", "--concurrency", "3"])
        .current_dir(&support)
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("--spec") && stderr.contains("--concurrency"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_must_stay_below_the_delivery_limit() -> anyhow::Result<()> {
    let system = System::start().await?;
    let output = system
        .baton(&["worker", "x", "--relay", "--max-attempts", "30"])
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("max_attempts (30) must be below max_deliveries (20)"),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scale_out_bench_runs_one_two_and_four_worker_processes() -> anyhow::Result<()> {
    let system = crate::util::System::start().await?;
    let args = [
        "bench",
        "--scale-out",
        "--delay-ms",
        "20",
        "--concurrency",
        "2",
        "--round-secs",
        "1",
    ];
    let stdout = system.baton_stdout(&args)?;
    // One row per round: workers, tasks (ideal rate × 1 s), then the figures.
    let rows = rows(&stdout, 5);
    let rounds: Vec<(&str, &str)> = rows.iter().map(|cells| (cells[0], cells[1])).collect();
    assert_eq!(
        rounds,
        [("1", "100"), ("2", "200"), ("4", "400")],
        "{stdout}"
    );
    for cells in &rows {
        let efficiency: f64 = cells[4].parse()?;
        assert!(efficiency > 0.0, "{stdout}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_limits_bench_runs_every_case_and_no_session_fails() -> anyhow::Result<()> {
    let system = crate::util::System::start().await?;
    let args = [
        "bench",
        "--limits",
        "--tasks",
        "40",
        "--limit-rps",
        "40",
        "--concurrency",
        "4",
    ];
    let stdout = system.baton_stdout(&args)?;
    for label in [
        "a) limit = provider's",
        "b) no limit, headers",
        "c) no limit, no headers",
        "d) limit = 2 × provider's",
        "e) no limit, continuous",
        "f) no limit, Anthropic",
    ] {
        let row = stdout
            .lines()
            .find(|line| line.starts_with(label))
            .ok_or_else(|| anyhow::anyhow!("no row {label:?}: {stdout}"))?;
        // The last seven cells: completed, failed, requests, 429s, 429 %,
        // answered/s, × the limit.
        let cells: Vec<&str> = row.split_whitespace().collect();
        let cells = &cells[cells.len() - 7..];
        assert_eq!(cells[..2], ["40", "0"], "{label}: {stdout}");
        let requests: u64 = cells[2].parse()?;
        let refused: u64 = cells[3].parse()?;
        assert_eq!(requests - refused, 40, "one answer per session: {stdout}");
    }
    // g): the lone conversation's 40 turns, and their ratio.
    let lone = stdout
        .lines()
        .find(|line| line.starts_with("g) fresh deployment"))
        .ok_or_else(|| anyhow::anyhow!("no case g: {stdout}"))?;
    let ratio: f64 = lone
        .split("ratio ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no ratio: {lone}"))?
        .parse()?;
    assert!(ratio > 0.0, "{lone}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ttft_bench_compares_the_first_token_through_baton_with_the_models_own()
-> anyhow::Result<()> {
    let system = crate::util::System::start().await?;
    let stdout = system.baton_stdout(&["bench", "--ttft", "--tasks", "5"])?;
    // Each row: a label, then p50 and p99 in ms.
    let row = |label: &str| bench_row(&stdout, label, 2).map(|cells| (cells[0], cells[1]));
    let (own, _) = row("model's own")?;
    let (through, _) = row("through Baton, at the client")?;
    // The stand-in thinks 20 ms before its first token; the client cannot
    // have it sooner.
    assert!(own >= 20.0 && through > own, "{stdout}");
    row("direct HTTP client")?;
    row("dispatch")?;
    row("relay")?;
    assert!(
        stdout.contains("ratio through Baton / direct (p50)"),
        "{stdout}"
    );
    Ok(())
}

#[test]
fn a_bench_on_its_own_server_counts_the_cpu_and_bytes_each_hop_sends_it() -> anyhow::Result<()> {
    // No --nats-url: the bench starts its server, and reads its counters.
    let output = std::process::Command::new(baton_testkit::baton_binary())
        .args([
            "bench",
            "--only",
            "same-writes",
            "--tasks",
            "40",
            "--warmup",
            "5",
        ])
        .args(["--rounds", "1", "--payload-bytes", "300"])
        .env_remove("NATS_URL")
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let row = stdout
        .split_once("cpu per hop (µs)")
        .and_then(|(_, table)| {
            table
                .lines()
                .find(|line| line.starts_with("raw, same writes"))
        })
        .with_context(|| format!("no cpu row: {stdout}"))?;
    let cells: Vec<&str> = row.split_whitespace().collect();
    let numbers: Vec<f64> = cells[cells.len() - 4..]
        .iter()
        .map(|cell| cell.parse::<f64>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("a figure is missing: {row}"))?;
    // A hop of this relay writes the 300-byte task on and one event of
    // about 220 bytes, with their headers: more than 520 bytes, and far
    // less than ten times that.
    // The server's CPU is known (a number, not `-`): the bench started it.
    // (Its value may be 0 over so short a run: the counters tick every 10 ms.)
    let bytes = numbers[3];
    assert!((520.0..5_200.0).contains(&bytes), "{row}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_all_prints_every_table_in_one_run_with_each_sides_writes_per_hop()
-> anyhow::Result<()> {
    let system = crate::util::System::start().await?;
    let args = [
        "bench",
        "--all",
        "--tasks",
        "12",
        "--warmup",
        "3",
        "--concurrency",
        "2",
        "--rounds",
        "2",
        "--delay-ms",
        "20",
        "--round-secs",
        "1",
        "--context-bytes",
        "2000,600000",
    ];
    let stdout = system.baton_stdout(&args)?;
    let (main, rest) = stdout
        .split_once("scale-out bench:")
        .with_context(|| format!("no scale-out section: {stdout}"))?;
    let (scale, context) = rest
        .split_once("context-size bench:")
        .with_context(|| format!("no context-size section after scale-out: {stdout}"))?;
    let (sides, ratios) = main
        .split_once("ratio (median of rounds)")
        .with_context(|| format!("no ratio table: {stdout}"))?;
    // The sides' last column: messages stored per hop, counted in the
    // streams (3 hops: 3 envelopes per task, plus its events).
    let writes: Vec<(String, String)> = sides
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (cells.len() > 5 && cells[cells.len() - 5].parse::<f64>().is_ok()).then(|| {
                (
                    cells[..cells.len() - 5].join(" "),
                    cells[cells.len() - 1].to_owned(),
                )
            })
        })
        .collect();
    let expected = [
        ("raw JetStream", "1.00"),
        ("raw, same writes", "2.00"),
        ("raw, 3 writes", "3.00"),
        ("baton full", "2.00"),
        ("baton full, unfolded", "3.00"),
        ("baton full, confirmed ack", "2.00"),
        ("baton lean", "1.33"),
        ("baton full, versioned", "2.00"),
    ]
    .map(|(side, writes)| (side.to_owned(), writes.to_owned()));
    assert_eq!(writes, expected, "{stdout}");
    // Each ratio: four medians, then the throughput ratio of each of the 2 rounds.
    let names: Vec<String> = ratios
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let split = cells.len().checked_sub(6)?;
            let numbers = cells[split..].iter().all(|c| c.parse::<f64>().is_ok());
            (numbers && split > 0).then(|| cells[..split].join(" "))
        })
        .collect();
    let expected = [
        "full / raw",
        "full / same writes",
        "full / unfolded",
        "unfolded / 3 writes",
        "plain / confirmed",
        "lean / raw",
        "lean / full",
        "versioned / full",
    ];
    assert_eq!(names, expected, "{stdout}");
    assert!(
        ratios.contains("goals: full / same writes throughput >= 0.85, cpu <= 1.2"),
        "{stdout}"
    );
    // CPU per hop: every side, the worker's from this process's counters;
    // the server's, the total and the bytes into it are not known (the
    // bench did not start it).
    let (_, cpu) = ratios
        .split_once("cpu per hop (µs)")
        .with_context(|| format!("no cpu table: {stdout}"))?;
    let cpu_rows: Vec<String> = cpu
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            let split = cells.len().checked_sub(4)?;
            let worker = cells.get(split)?.parse::<u64>().is_ok();
            let unknown = cells[split + 1..].iter().all(|cell| *cell == "-");
            (worker && unknown && split > 0).then(|| cells[..split].join(" "))
        })
        .collect();
    let sides = [
        "raw JetStream",
        "raw, same writes",
        "raw, 3 writes",
        "baton full",
        "baton full, unfolded",
        "baton full, confirmed ack",
        "baton lean",
        "baton full, versioned",
    ];
    assert_eq!(cpu_rows, sides, "{stdout}");
    assert!(cpu.contains("full / same writes cpu -"), "{stdout}");
    assert!(cpu.contains("lean / raw cpu -"), "{stdout}");
    assert!(cpu.contains("full / same writes bytes -"), "{stdout}");
    // Scale-out: one row per round, tasks = the ideal rate (N × 2 / 20 ms) × 1 s.
    let rounds: Vec<(&str, &str)> = rows(scale, 5)
        .iter()
        .map(|cells| (cells[0], cells[1]))
        .collect();
    assert_eq!(
        rounds,
        [("1", "100"), ("2", "200"), ("4", "400")],
        "{stdout}"
    );
    // The context curve: one row per size, 12 tasks each (--tasks caps it).
    // 600 KB is over half the server's max_payload, so it is claim-checked.
    let sizes: Vec<(&str, &str)> = rows(context, 7)
        .iter()
        .map(|cells| (cells[0], cells[1]))
        .collect();
    assert_eq!(sizes, [("2000", "12"), ("600000", "12")], "{stdout}");
    Ok(())
}

/// The rows of a printed table with `width` cells whose first two cells are numbers.
fn rows(table: &str, width: usize) -> Vec<Vec<&str>> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|cells| {
            cells.len() == width && cells[..2].iter().all(|cell| cell.parse::<u64>().is_ok())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_learning_bench_measures_todays_ranking_and_learned_routing() -> anyhow::Result<()> {
    let system = crate::util::System::start().await?;
    let stdout = system.baton_stdout(&["bench", "--learning", "--tasks", "20"])?;
    // Each row: a label, then sessions, the three shares in %, the regret.
    let row = |label: &str| bench_row(&stdout, label, 5);
    let today = row("today's ranking")?;
    assert_eq!(today[0], 20.0, "{stdout}");
    // The shares of every row add up to the sessions.
    assert!(
        (today[1] + today[2] + today[3] - 100.0).abs() < 0.5,
        "{stdout}"
    );
    let degraded = row("after solver_c degrades")?;
    assert_eq!(degraded[0], 20.0, "{stdout}");
    assert!(
        stdout.contains("regret: expected escalations above an oracle"),
        "{stdout}"
    );
    Ok(())
}

/// The last `n` numbers of the row of `stdout` that starts with `label`.
fn bench_row(stdout: &str, label: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let line = stdout
        .lines()
        .find(|line| line.trim_start().starts_with(label))
        .ok_or_else(|| anyhow::anyhow!("no {label:?} row: {stdout}"))?;
    let cells: Vec<f64> = line
        .split_whitespace()
        .rev()
        .take(n)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(cells.into_iter().rev().collect())
}

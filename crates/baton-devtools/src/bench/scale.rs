//! `baton bench --scale-out`: an LLM-like agent type served by 1, 2 and 4
//! worker processes, against the ideal throughput N × concurrency / delay.
//!
//! The model is a local OpenAI-compatible stand-in that answers every chat
//! completion after a fixed delay, so the agent spends its time waiting, as
//! an LLM agent does. Each worker is a real `baton worker --spec` process.
//! Completions are counted from the sessions' `completed` events.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use baton_client::Client;
use baton_proto::{AgentName, Envelope, Event, EventType, Subjects, Wire};
use futures::StreamExt as _;
use tokio::sync::Semaphore;

/// How many worker processes each round runs.
const ROUNDS: [usize; 3] = [1, 2, 4];

/// What the scale-out bench needs besides the connection.
pub(super) struct ScaleOut<'a> {
    pub client: &'a async_nats::Client,
    /// The NATS URL the worker processes get.
    pub url: &'a str,
    pub delay: Duration,
    pub concurrency: usize,
    /// How long each round is measured for, at the ideal rate.
    pub seconds: u64,
    /// The store directory of the server, when the bench started it.
    pub store_dir: Option<&'a std::path::Path>,
    /// Flags every worker process it starts gets.
    pub worker_flags: &'a [&'a str],
}

/// Runs the rounds and prints tasks/s and efficiency for each.
pub(super) async fn run(bench: &ScaleOut<'_>) -> anyhow::Result<()> {
    let model = stand_in(bench.delay).await?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("thinker.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"thinker\"\nkind = \"llm\"\nconcurrency = {}\ntimeout_ms = 60000\n\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n",
            bench.concurrency
        ),
    )?;
    println!(
        "scale-out bench: an LLM-like agent (the stand-in answers after {:?}), concurrency {} per worker",
        bench.delay, bench.concurrency
    );
    println!();
    println!(
        "{:>8} {:>8} {:>10} {:>10} {:>11}",
        "workers", "tasks", "tasks/s", "ideal/s", "efficiency"
    );
    let mut efficiencies = Vec::new();
    for workers in ROUNDS {
        let ideal = (workers * bench.concurrency) as f64 / bench.delay.as_secs_f64();
        let tasks = ((ideal * bench.seconds as f64) as u64).max(20);
        let prefix = format!("scale{workers}");
        let measured = round(bench, &spec, "thinker", &prefix, workers, tasks).await?;
        let efficiency = measured / ideal;
        efficiencies.push(efficiency);
        println!("{workers:>8} {tasks:>8} {measured:>10.1} {ideal:>10.1} {efficiency:>11.2}");
    }
    println!(
        "efficiency: measured tasks/s over N × concurrency / delay; target >= 0.90 at 4 workers"
    );
    Ok(())
}

/// One round: `workers` processes of agent type `agent` (from `spec`) on
/// subject prefix `prefix`, `tasks` sessions in a closed loop that keeps
/// every slot busy; returns tasks/s.
pub(super) async fn round(
    bench: &ScaleOut<'_>,
    spec: &std::path::Path,
    agent: &str,
    prefix: &str,
    workers: usize,
    tasks: u64,
) -> anyhow::Result<f64> {
    let measured = measure(bench, (spec, agent, prefix), workers, tasks, false).await?;
    Ok(measured.rate)
}

/// What a round measured.
pub(super) struct Measured {
    /// Tasks/s over the clocked tasks.
    pub rate: f64,
    /// How long a first task took before the clock started (a warmed
    /// round), from its submission to its `completed` event: what starting
    /// the agent's program costs a worker's first task.
    pub first: Option<Duration>,
}

/// A round as [`round`], `warm`: first one task, alone and outside the
/// clock, so the clocked tasks measure a running agent (a persistent
/// program started lazily is started by it).
pub(super) async fn measure(
    bench: &ScaleOut<'_>,
    (spec, agent, prefix): (&std::path::Path, &str, &str),
    workers: usize,
    tasks: u64,
    warm: bool,
) -> anyhow::Result<Measured> {
    let subjects = Subjects::new(prefix)?;
    let children = start_workers(bench, spec, (agent, prefix), workers, false).await?;
    let baton = Client::new(bench.client.clone(), subjects.clone());
    let agent = AgentName::new(agent)?;
    let window = Arc::new(Semaphore::new(2 * workers * bench.concurrency));
    let done = Arc::new(AtomicU64::new(0));
    let mut events = bench.client.subscribe(subjects.all_events()).await?;
    let (counted, freed) = (done.clone(), window.clone());
    let counter = tokio::spawn(async move {
        while let Some(message) = events.next().await {
            if completed(&message.payload) {
                counted.fetch_add(1, Ordering::Relaxed);
                freed.add_permits(1);
            }
        }
    });
    let first = if warm {
        let clock = Instant::now();
        window.acquire().await?.forget();
        baton.submit_to(&agent, &Envelope::task("warm-up")).await?;
        wait_for(&done, 1, clock).await?;
        Some(clock.elapsed())
    } else {
        None
    };
    let before = done.load(Ordering::Relaxed);
    let clock = Instant::now();
    for n in 0..tasks {
        window.acquire().await?.forget();
        baton
            .submit_to(&agent, &Envelope::task(format!("question {n}")))
            .await?;
    }
    wait_for(&done, before + tasks, clock).await?;
    let elapsed = clock.elapsed();
    counter.abort();
    drop(children);
    Ok(Measured {
        rate: tasks as f64 / elapsed.as_secs_f64(),
        first,
    })
}

/// Waits until `done` reaches `count`, for at most 10 minutes from `clock`.
async fn wait_for(done: &AtomicU64, count: u64, clock: Instant) -> anyhow::Result<()> {
    while done.load(Ordering::Relaxed) < count {
        anyhow::ensure!(
            clock.elapsed() < Duration::from_secs(600),
            "only {} of {count} tasks completed",
            done.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

/// Whether an event's payload is a `completed` event. Its kind is read
/// alone, the rest skipped: the bench follows every event of every
/// session, and what it spends reading them is not the runtime's cost.
fn completed(payload: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: EventType,
    }
    match rmp_serde::from_slice::<Kind>(payload) {
        Ok(event) => event.kind == EventType::Completed,
        Err(_) => Event::from_msgpack(payload).is_ok_and(|e| e.kind == EventType::Completed),
    }
}

/// Starts `count` `baton worker --spec` processes of agent type `agent` on
/// subject prefix `prefix`, and waits until they serve and have pulled.
/// `quiet` ones log only errors, and not to the terminal.
pub(super) async fn start_workers(
    bench: &ScaleOut<'_>,
    spec: &std::path::Path,
    (agent, prefix): (&str, &str),
    count: usize,
    quiet: bool,
) -> anyhow::Result<Vec<Worker>> {
    let mut children = Vec::new();
    for index in 0..count {
        children.push(Worker(
            Command::new(std::env::current_exe()?)
                .args([
                    "--nats-url",
                    bench.url,
                    "--prefix",
                    prefix,
                    "worker",
                    "--spec",
                ])
                .arg(spec)
                .args(["--no-registry", "--instance", &format!("w{index}")])
                .args(bench.worker_flags)
                .env("RUST_LOG", if quiet { "error" } else { "warn" })
                .stdout(Stdio::null())
                .stderr(if quiet {
                    Stdio::null()
                } else {
                    Stdio::inherit()
                })
                .spawn()
                .context("cannot start a worker process")?,
        ));
    }
    let baton = Client::new(bench.client.clone(), Subjects::new(prefix)?);
    let agent = AgentName::new(agent)?;
    let started = Instant::now();
    while baton.check_served(&agent).await.is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the workers did not start within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let every process pull before the clock starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(children)
}

/// A chat completion that says `done`, as the stand-ins answer.
pub(super) fn answer() -> serde_json::Value {
    serde_json::json!({
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "model": "stand-in",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    })
}

/// A worker process, killed when dropped.
pub(super) struct Worker(pub(super) Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An OpenAI-compatible chat-completions stand-in on a free loopback port
/// that answers after `delay`; returns its base URL.
async fn stand_in(delay: Duration) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let answer = move || async move {
        tokio::time::sleep(delay).await;
        axum::Json(answer())
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

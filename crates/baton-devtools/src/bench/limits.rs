//! `baton bench --limits`: four worker processes of an LLM agent type at
//! concurrency 32 against a stand-in model that allows `--limit-rps`
//! requests in any second and refuses the rest with 429 and
//! `Retry-After: 1`, as a provider's per-account limit does. The same load
//! runs six ways: a) `[llm.limits]` at the provider's limit; b) no limit,
//! the provider sending `x-ratelimit-*` headers aligned to whole requests;
//! c) no limit and no headers; d) `[llm.limits]` at twice the provider's
//! limit; e) no limit, OpenAI's headers for a bucket refilled continuously;
//! f) no limit, Anthropic's headers. Then g): a fresh deployment, an
//! instant unlimited model, and one conversation of 40 turns through
//! `baton a2a serve`: the p50 of its last 20 turns over the p50 of turns
//! 2–21 (a slow start that held a lone caller back would make the early
//! turns slower).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Headers, RateWindow};

use baton_client::Client;
use baton_proto::{AgentName, Envelope, Event, EventType, Subjects, Wire};
use futures::StreamExt as _;

use super::quantile;
use super::scale::{ScaleOut, answer, start_workers};

/// Worker processes per round.
const WORKERS: usize = 4;

/// What the stand-in counted.
#[derive(Default)]
struct Counts {
    answered: AtomicU64,
    refused: AtomicU64,
}

/// The configurations: a label, `[llm.limits]` at this many times the
/// provider's limit (none: no section), and the rate-limit headers the
/// provider sends (`Continuous` and `Anthropic` at `--limit-rps` a
/// second, written as a minute's limit).
fn cases(limit_rps: u32) -> [(&'static str, Option<f64>, Headers); 6] {
    let per_minute = u64::from(limit_rps) * 60;
    [
        ("a) limit = provider's", Some(1.0), Headers::None),
        ("b) no limit, headers", None, Headers::Aligned),
        ("c) no limit, no headers", None, Headers::None),
        ("d) limit = 2 × provider's", Some(2.0), Headers::None),
        (
            "e) no limit, continuous",
            None,
            Headers::Continuous { per_minute },
        ),
        (
            "f) no limit, Anthropic",
            None,
            Headers::Anthropic { per_minute },
        ),
    ]
}

/// Runs the four rounds with `tasks` sessions each, and prints them.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64, limit_rps: u32) -> anyhow::Result<()> {
    anyhow::ensure!(limit_rps >= 1, "--limit-rps must be at least 1");
    println!(
        "limits bench: {WORKERS} worker processes at concurrency {}, {tasks} tasks, a model that allows {limit_rps} requests/s (429 and Retry-After: 1 above)",
        bench.concurrency
    );
    println!();
    println!(
        "{:<27} {:>9} {:>7} {:>9} {:>8} {:>7} {:>11} {:>9}",
        "", "completed", "failed", "requests", "429s", "429 %", "answered/s", "× limit"
    );
    for (index, (label, share, headers)) in cases(limit_rps).iter().enumerate() {
        let limits = share.map_or_else(String::new, |share| {
            let per_minute = (f64::from(limit_rps) * 60.0 * share) as u32;
            format!("\n[llm.limits]\nrequests_per_minute = {per_minute}\n")
        });
        let counts = Arc::new(Counts::default());
        let model = stand_in(limit_rps, *headers, counts.clone()).await?;
        let dir = tempfile::tempdir()?;
        let spec = dir.path().join("thinker.toml");
        std::fs::write(
            &spec,
            format!(
                "name = \"thinker\"\nkind = \"llm\"\nconcurrency = {}\ntimeout_ms = 300000\n\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n{limits}",
                bench.concurrency
            ),
        )?;
        let prefix = format!("limits{index}");
        let (completed, failed, elapsed) = round(bench, &spec, &prefix, tasks).await?;
        let answered = counts.answered.load(Ordering::Relaxed);
        let refused = counts.refused.load(Ordering::Relaxed);
        let requests = answered + refused;
        let share = 100.0 * refused as f64 / requests.max(1) as f64;
        let rate = answered as f64 / elapsed.as_secs_f64();
        println!(
            "{label:<27} {completed:>9} {failed:>7} {requests:>9} {refused:>8} {share:>7.1} {rate:>11.2} {:>9.2}",
            rate / f64::from(limit_rps)
        );
    }
    println!(
        "answered/s: model calls answered per second, from the first task sent to the last session's end; \
         targets: at the limit or with headers (a, b, e, f) >= 0.90 × the limit and <= 2 % 429s; \
         with no limit and no headers (c), or twice the limit (d), >= 0.85 × and <= 5 %; no session fails"
    );
    lone(bench).await
}

/// Case g: a fresh deployment, an instant unlimited model, and one
/// conversation of 40 turns through `baton a2a serve`, one turn at a time.
async fn lone(bench: &ScaleOut<'_>) -> anyhow::Result<()> {
    let counts = Arc::new(Counts::default());
    let model = stand_in(1_000_000, Headers::None, counts).await?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("desk.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"desk\"\nkind = \"llm\"\n\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n"
        ),
    )?;
    // A prefix of its own: a fresh deployment, nothing learned.
    let prefix = format!("lone{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let _desk = start_workers(bench, &spec, ("desk", &prefix), 1, true).await?;
    let router = ["router", "--default-agent", "desk", "--no-registry"];
    let _router = super::turns::spawn(bench, &prefix, &router)?;
    let listen = format!("127.0.0.1:{}", super::turns::free_port()?);
    let _gateway = super::turns::spawn(bench, &prefix, &["a2a", "serve", "--listen", &listen])?;
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();
    super::turns::ready(&http, &url).await?;
    let context = uuid::Uuid::new_v4().to_string();
    let mut times = Vec::with_capacity(40);
    for turn in 1..=40 {
        let text = format!("Turn {turn}.");
        times.push(
            super::turns::say(&http, &url, Some(&context), &text)
                .await?
                .0,
        );
    }
    let (early, late) = (quantile(&times[1..21], 0.5), quantile(&times[20..], 0.5));
    println!();
    println!(
        "g) fresh deployment, one conversation of 40 turns through baton a2a serve, instant unlimited model: \
         p50 of turns 2–21 {early:.2} ms, of turns 21–40 {late:.2} ms, ratio {:.2} (target >= 0.67)",
        late / early
    );
    Ok(())
}

/// One round: `WORKERS` processes of the spec on subject prefix `prefix`,
/// `tasks` sessions sent at once; returns (completed, failed, elapsed).
async fn round(
    bench: &ScaleOut<'_>,
    spec: &std::path::Path,
    prefix: &str,
    tasks: u64,
) -> anyhow::Result<(u64, u64, Duration)> {
    let subjects = Subjects::new(prefix)?;
    let children = start_workers(bench, spec, ("thinker", prefix), WORKERS, true).await?;
    let baton = Client::new(bench.client.clone(), subjects.clone());
    let agent = AgentName::new("thinker")?;
    let mut events = bench.client.subscribe(subjects.all_events()).await?;
    let clock = Instant::now();
    for n in 0..tasks {
        baton
            .submit_to(&agent, &Envelope::task(format!("question {n}")))
            .await?;
    }
    let (mut completed, mut failed) = (0, 0);
    while completed + failed < tasks {
        let next = tokio::time::timeout(Duration::from_secs(300), events.next()).await;
        let Ok(Some(message)) = next else {
            anyhow::bail!("only {} of {tasks} sessions ended", completed + failed);
        };
        match Event::from_msgpack(&message.payload).map(|e| e.kind) {
            Ok(EventType::Completed) => completed += 1,
            Ok(EventType::Failed) => failed += 1,
            _ => {}
        }
    }
    let elapsed = clock.elapsed();
    drop(children);
    Ok((completed, failed, elapsed))
}

/// An OpenAI-compatible stand-in on a free loopback port that answers at
/// most `per_second` requests in any second, and refuses the rest with 429
/// and `Retry-After: 1`; every answer carries `headers`. Returns its base
/// URL.
async fn stand_in(
    per_second: u32,
    headers: Headers,
    counts: Arc<Counts>,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let window = Arc::new(RateWindow::with(
        per_second as usize,
        Duration::from_secs(1),
        "1",
        headers,
    ));
    let answer = move || {
        let (window, counts) = (window.clone(), counts.clone());
        async move {
            let verdict = window.admit();
            let mut response = if verdict.admitted {
                counts.answered.fetch_add(1, Ordering::Relaxed);
                axum::response::IntoResponse::into_response(axum::Json(answer()))
            } else {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                axum::response::IntoResponse::into_response((
                    axum::http::StatusCode::TOO_MANY_REQUESTS,
                    "rate limited",
                ))
            };
            for (name, value) in verdict.headers {
                if let (Ok(name), Ok(value)) = (
                    axum::http::HeaderName::try_from(name),
                    axum::http::HeaderValue::try_from(value),
                ) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

//! Providers' rate-limit headers as each writes them, against the stand-in
//! model's modes: OpenAI's for a continuous bucket, Anthropic's, a per-day
//! limit beside a per-minute one, `remaining` and `reset` only; and a fresh
//! deployment with nothing known, where a lone caller is never held back
//! and a burst starts small. Each test counts the requests, the `429`s,
//! and what was in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use baton_devtools::{Headers, RateWindow};
use baton_proto::EventType;
use baton_testkit::{FakeLlm, Scripted};

use super::limits::{doctor, ends, schedule, spec, submit, workers};
use crate::util::System;

/// What the stand-in counted: answered, refused with 429, and when each
/// call came.
#[derive(Default)]
struct Counts {
    answered: AtomicUsize,
    refused: AtomicUsize,
    starts: std::sync::Mutex<Vec<Instant>>,
}

/// A model that answers at most `per_second` in any second, with `headers`,
/// after `delay`; it counts what it sees.
fn model(per_second: usize, headers: Headers, delay: Duration) -> (FakeLlm, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let window = RateWindow::with(per_second, Duration::from_secs(1), "1", headers);
    let seen = counts.clone();
    let llm = FakeLlm::responding(move |_| {
        seen.starts.lock().unwrap().push(Instant::now());
        let verdict = window.admit();
        let mut answer = if verdict.admitted {
            seen.answered.fetch_add(1, Ordering::SeqCst);
            Scripted::text("done").with_usage("stand-in", 10, 1)
        } else {
            seen.refused.fetch_add(1, Ordering::SeqCst);
            Scripted::error(429, &[])
        };
        answer.headers = verdict.headers;
        answer.after(delay)
    })
    .expect("the stand-in model starts");
    (llm, counts)
}

/// Runs `tasks` sessions on `processes` workers against `llm`; every one
/// completes, one answer each. Returns the system, for its schedule.
async fn run(
    llm: &FakeLlm,
    counts: &Counts,
    processes: usize,
    tasks: usize,
) -> anyhow::Result<System> {
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, processes).await?;
    let sessions = submit(&system, "thinker", tasks).await?;
    let ends = ends(&system, &sessions, Duration::from_secs(90)).await?;
    assert!(
        ends.iter().all(|e| e.kind == EventType::Completed),
        "every session completes"
    );
    assert_eq!(
        counts.answered.load(Ordering::SeqCst),
        tasks,
        "one answer per session"
    );
    Ok(system)
}

/// Paced at a heard 10 a second: few refusals, the ceiling heard, and
/// `baton doctor` naming the headers.
async fn heard_ten_a_second(headers: Headers, named: &str) -> anyhow::Result<()> {
    let (llm, counts) = model(10, headers, Duration::ZERO);
    let system = run(&llm, &counts, 2, 60).await?;
    let refused = counts.refused.load(Ordering::SeqCst);
    // Unpaced, 64 calls at once against 10 a second would be refused about
    // 50 times; a rate read too high (1 used over a few ms) would draw a
    // 429 every second.
    assert!(refused <= 4, "{refused} refused of {}", 60 + refused);
    let schedule = schedule(&system).await?;
    assert_eq!(schedule["source"], "headers", "{schedule}");
    let ceiling = schedule["ceiling"].as_f64().unwrap_or_default();
    assert!((9.5..=10.5).contains(&ceiling), "{schedule}");
    let doctor = doctor(&system)?;
    let line = doctor
        .lines()
        .find(|l| l.contains("limits") && l.contains("stand-in"))
        .with_context(|| format!("no limits line in:\n{doctor}"))?;
    assert!(line.contains(named), "{line}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_headers_of_a_continuous_bucket_give_the_documented_rate() -> anyhow::Result<()> {
    heard_ten_a_second(Headers::Continuous { per_minute: 600 }, "x-ratelimit").await
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_headers_give_the_rate() -> anyhow::Result<()> {
    heard_ten_a_second(
        Headers::Anthropic { per_minute: 600 },
        "anthropic-ratelimit",
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_per_day_limit_beside_a_per_minute_one_binds_as_it_runs_low() -> anyhow::Result<()> {
    // 600 a minute, but 12 a "day" of 6 s: 18 sessions take two days.
    let headers = Headers::PerDay {
        per_minute: 600,
        per_day: 12,
        day_ms: 6_000,
    };
    let (llm, counts) = model(100, headers, Duration::ZERO);
    let system = run(&llm, &counts, 1, 18).await?;
    // The day's allowance is spread until its reset, not spent and refused.
    let refused = counts.refused.load(Ordering::SeqCst);
    assert!(refused <= 3, "{refused} refused");
    let schedule = schedule(&system).await?;
    let ceiling = schedule["ceiling"].as_f64().unwrap_or_default();
    assert!(
        ceiling > 0.0 && ceiling < 5.0,
        "the day binds, not the minute: {schedule}"
    );
    let doctor = doctor(&system)?;
    assert!(doctor.contains("x-ratelimit-day"), "{doctor}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn remaining_and_reset_alone_hold_calls_back_when_nothing_is_left() -> anyhow::Result<()> {
    let (llm, counts) = model(10, Headers::RemainingOnly, Duration::ZERO);
    let system = run(&llm, &counts, 2, 40).await?;
    let refused = counts.refused.load(Ordering::SeqCst);
    // Unpaced and unheard, 40 at once against 10 a second would be refused
    // about 30 times.
    assert!(refused <= 8, "{refused} refused of {}", 40 + refused);
    let schedule = schedule(&system).await?;
    assert!(
        schedule["headers"].as_u64().unwrap_or_default() & 1 == 1,
        "{schedule}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lone_caller_is_never_held_back_and_a_burst_starts_small() -> anyhow::Result<()> {
    // An unlimited model with no headers, 200 ms an answer.
    let (llm, counts) = model(100_000, Headers::None, Duration::from_millis(200));
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 2).await?;
    // One caller, one call at a time.
    for _ in 0..6 {
        let sessions = submit(&system, "thinker", 1).await?;
        ends(&system, &sessions, Duration::from_secs(30)).await?;
    }
    // Nothing paced it, and nothing widened the window: it was never held.
    let lone = schedule(&system).await?;
    assert_eq!(lone["unpaced"], true, "{lone}");
    assert_eq!(lone["rate"].as_f64(), Some(0.0), "{lone}");
    assert_eq!(lone["window"].as_f64(), Some(4.0), "{lone}");
    assert_eq!(counts.refused.load(Ordering::SeqCst), 0);
    // A burst of 48 then starts with 4 in flight, and widens.
    let began = Instant::now();
    let sessions = submit(&system, "thinker", 48).await?;
    ends(&system, &sessions, Duration::from_secs(60)).await?;
    // Every answer takes 200 ms: a call is in flight from its start until
    // then.
    let starts: Vec<Instant> = counts.starts.lock().unwrap().clone();
    let burst: Vec<(Duration, usize)> = starts
        .iter()
        .filter(|at| **at >= began)
        .map(|at| {
            let flying = starts
                .iter()
                .filter(|other| {
                    **other <= *at && at.duration_since(**other) < Duration::from_millis(200)
                })
                .count();
            (at.duration_since(began), flying)
        })
        .collect();
    assert_eq!(burst.len(), 48, "one call per session");
    // Until the first answers come back, 200 ms on, the window is 4.
    let early = burst
        .iter()
        .filter(|(at, _)| *at < Duration::from_millis(190));
    let most_early = early.map(|(_, flying)| *flying).max().unwrap_or(0);
    assert!(
        most_early <= 4,
        "{most_early} in flight at first: {burst:?}"
    );
    let most = burst.iter().map(|(_, flying)| *flying).max().unwrap_or(0);
    assert!(most > 4, "the window never widened: {burst:?}");
    let after = schedule(&system).await?;
    assert!(
        after["window"].as_f64().unwrap_or_default() > 4.0,
        "{after}"
    );
    assert_eq!(
        after["unpaced"], true,
        "no 429, so still not paced: {after}"
    );
    Ok(())
}

//! Shared model rate limits: worker processes of one or more agent types
//! take turns from one schedule in NATS, so a provider's per-account limit
//! holds however many workers run, configured, heard from the provider's
//! headers, or learned from its 429s. The stand-in model enforces the limit
//! (429 with `Retry-After` above it) and counts every request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use baton_devtools::RateWindow;
use baton_proto::{AgentName, Envelope, Event, EventType};
use baton_testkit::{FakeLlm, Scripted, eventually};

use crate::operations::metrics::{metrics_url, scrape, value};
use crate::util::System;

/// What the stand-in saw: requests answered, requests refused with 429, and
/// when each was answered or refused, with the agent type that asked.
#[derive(Default)]
struct Seen {
    answered: AtomicUsize,
    refused: AtomicUsize,
    times: Mutex<Vec<(Instant, bool, String)>>,
}

/// A model that answers at most `per_second` requests in any second and
/// refuses the rest with 429 and `Retry-After: retry_after`.
fn limited_model(per_second: usize, retry_after: &'static str) -> (FakeLlm, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let window = RateWindow::new(per_second, Duration::from_secs(1), retry_after, false);
    let counted = seen.clone();
    let llm = FakeLlm::responding(move |body| {
        let asker = body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let verdict = window.admit();
        let admitted = verdict.admitted;
        counted
            .times
            .lock()
            .unwrap()
            .push((Instant::now(), admitted, asker));
        let mut answer = if admitted {
            counted.answered.fetch_add(1, Ordering::SeqCst);
            Scripted::text("done").with_usage("stand-in", 10, 1)
        } else {
            counted.refused.fetch_add(1, Ordering::SeqCst);
            Scripted::error(429, &[])
        };
        answer.headers = verdict.headers;
        answer
    })
    .expect("the stand-in model starts");
    (llm, seen)
}

/// An LLM spec for agent type `name` on `llm`, `limits` in `[llm.limits]`.
pub(super) fn spec(
    dir: &std::path::Path,
    name: &str,
    llm: &FakeLlm,
    limits: &str,
) -> anyhow::Result<String> {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\nkind = \"llm\"\nconcurrency = 32\ntimeout_ms = 120000\n\n[llm]\nbase_url = \"{}\"\nmodel = \"stand-in\"\nsystem_prompt = \"{name}\"\n{limits}",
            llm.url()
        ),
    )?;
    Ok(path.to_string_lossy().into_owned())
}

/// Starts `count` worker processes of `spec`, labelled `name-N`, each with
/// its metrics on a free port; returns the metrics URLs.
pub(super) async fn workers(
    system: &mut System,
    name: &str,
    spec: &str,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let mut urls = Vec::new();
    for n in 0..count {
        let label = format!("{name}-{n}");
        let args = [
            "worker",
            "--spec",
            spec,
            "--no-registry",
            "--instance",
            &label,
            "--metrics-addr",
            "127.0.0.1:0",
        ];
        system.spawn(&label, &args, "worker started").await?;
        urls.push(metrics_url(system.process(&label).stderr())?);
    }
    Ok(urls)
}

/// The sum over `urls` of the sample `name` for the stand-in model.
pub(super) fn summed(urls: &[String], name: &str) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for url in urls {
        sum += value(&scrape(url)?, name, &[("model", "stand-in")]);
    }
    Ok(sum)
}

/// Submits `count` tasks to `agent` and returns their sessions.
pub(super) async fn submit(
    system: &System,
    agent: &str,
    count: usize,
) -> anyhow::Result<Vec<uuid::Uuid>> {
    let agent = AgentName::new(agent)?;
    let mut sessions = Vec::new();
    for n in 0..count {
        let task = Envelope::task(format!("question {n}"));
        sessions.push(task.session);
        system.client.submit_to(&agent, &task).await?;
    }
    Ok(sessions)
}

/// The last event of each session, once every one has ended.
pub(super) async fn ends(
    system: &System,
    sessions: &[uuid::Uuid],
    within: Duration,
) -> anyhow::Result<Vec<Event>> {
    let mut ends = Vec::new();
    for session in sessions {
        let history = eventually(within, || async {
            let history = system
                .client
                .history(*session)
                .await
                .map_err(|err| err.to_string())?;
            match history.last() {
                Some(last) if last.kind.is_terminal() => Ok(history),
                _ => Err(format!("session {session} runs: {} events", history.len())),
            }
        })
        .await?;
        ends.extend(history.last().cloned());
    }
    Ok(ends)
}

#[tokio::test(flavor = "multi_thread")]
async fn four_worker_processes_share_one_limit_and_every_session_completes() -> anyhow::Result<()> {
    // The provider allows 10 requests a second; four workers at concurrency
    // 32 could ask 128 at once. The limit is set a little under the
    // provider's, as the docs advise: calls leave with some jitter.
    let (llm, seen) = limited_model(10, "1");
    let dir = tempfile::tempdir()?;
    let limits = "\n[llm.limits]\nrequests_per_minute = 570\n";
    let spec = spec(dir.path(), "thinker", &llm, limits)?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 4).await?;
    let sessions = submit(&system, "thinker", 100).await?;
    let ends = ends(&system, &sessions, Duration::from_secs(90)).await?;
    let completed = ends
        .iter()
        .filter(|e| e.kind == EventType::Completed)
        .count();
    let answered = seen.answered.load(Ordering::SeqCst);
    let refused = seen.refused.load(Ordering::SeqCst);
    assert_eq!(completed, 100, "every session completes");
    assert_eq!(answered, 100, "one answered call per session, none doubled");
    // 2 % of the requests at the most met the provider's limit.
    assert!(
        refused * 50 <= answered + refused,
        "{refused} refused of {}",
        answered + refused
    );
    // The schedule is in NATS, shared by the four processes.
    let schedule = schedule(&system).await?;
    assert_eq!(schedule["source"], "configured", "{schedule}");
    Ok(())
}

/// The shared schedule of the stand-in model, as stored.
pub(super) async fn schedule(system: &System) -> anyhow::Result<serde_json::Value> {
    let bucket = system
        .client
        .jetstream()
        .get_key_value("BATON_LIMITS")
        .await?;
    let mut keys = bucket.keys().await?;
    while let Some(key) = futures::StreamExt::next(&mut keys).await.transpose()? {
        if key.contains("stand-in") {
            let bytes = bucket.get(&key).await?.context("the schedule is gone")?;
            return Ok(rmp_serde::from_slice(&bytes)?);
        }
    }
    anyhow::bail!("no schedule for the stand-in model")
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_limit_known_the_first_429_sets_the_rate_it_showed() -> anyhow::Result<()> {
    // Nothing configured, no headers: only the 429s teach the rate.
    let (llm, seen) = limited_model(10, "1");
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 2).await?;
    let sessions = submit(&system, "thinker", 120).await?;
    // The rate as the two processes share it, sampled while they work.
    let mut rates = Vec::new();
    let sampling = async {
        loop {
            if let Ok(schedule) = schedule(&system).await {
                rates.push((
                    schedule["rate"].as_f64().unwrap_or_default(),
                    schedule["refused"].as_u64().unwrap_or_default(),
                    schedule["unpaced"].as_bool().unwrap_or_default(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let ends = tokio::select! {
        ends = ends(&system, &sessions, Duration::from_secs(90)) => ends?,
        () = sampling => unreachable!(),
    };
    assert!(
        ends.iter().all(|e| e.kind == EventType::Completed),
        "every session completes"
    );
    assert_eq!(
        seen.answered.load(Ordering::SeqCst),
        120,
        "one answer per session"
    );
    let refused = seen.refused.load(Ordering::SeqCst);
    assert!(refused > 0, "the provider's limit was met");
    // The burst of 64 started small: the window of calls in flight, not
    // the 64, met the full provider window.
    assert!(refused <= 12, "{refused} refused of {}", 120 + refused);
    // Unpaced until the first 429; from then on paced near what it showed
    // (10 answered in the second before it).
    let first = rates
        .iter()
        .find(|(_, refused, unpaced)| *refused > 0 && !unpaced)
        .with_context(|| format!("never paced after a 429: {rates:?}"))?;
    assert!((4.0..=10.5).contains(&first.0), "{rates:?}");
    assert!(
        rates
            .iter()
            .all(|(rate, refused, unpaced)| *refused > 0 || (*unpaced && *rate == 0.0)),
        "paced before any 429: {rates:?}"
    );
    let last = schedule(&system).await?;
    assert_eq!(last["source"], "adaptive");
    assert_eq!(last["ceiling"].as_f64(), Some(0.0));
    let doctor = doctor(&system)?;
    assert!(
        doctor.contains("learned from the provider's 429s"),
        "{doctor}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_providers_headers_set_one_rate_for_every_worker() -> anyhow::Result<()> {
    let window = RateWindow::new(10, Duration::from_secs(1), "1", true);
    let (answered, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, r) = (answered.clone(), refused.clone());
    let llm = FakeLlm::responding(move |_| {
        let verdict = window.admit();
        let mut answer = if verdict.admitted {
            a.fetch_add(1, Ordering::SeqCst);
            Scripted::text("done").with_usage("stand-in", 10, 1)
        } else {
            r.fetch_add(1, Ordering::SeqCst);
            Scripted::error(429, &[])
        };
        answer.headers = verdict.headers;
        answer
    })?;
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    let urls = workers(&mut system, "thinker", &spec, 2).await?;
    let sessions = submit(&system, "thinker", 60).await?;
    let ends = ends(&system, &sessions, Duration::from_secs(60)).await?;
    assert!(ends.iter().all(|e| e.kind == EventType::Completed));
    assert_eq!(answered.load(Ordering::SeqCst), 60);
    // Paced at the provider's rate, nearly nothing is refused: at most the
    // odd call the window's edge meets when a loaded machine delays one
    // and sends the next on time. Unpaced, 60 calls at once against 10 a
    // second would be refused about 50 times.
    let refused = refused.load(Ordering::SeqCst);
    assert!(refused <= 5, "{refused} refused of {}", 60 + refused);
    // Heard from the headers: 10 a second, paced a little under.
    let schedule = schedule(&system).await?;
    assert_eq!(schedule["source"], "headers", "{schedule}");
    let ceiling = schedule["ceiling"].as_f64().unwrap_or_default();
    assert!((9.5..=10.5).contains(&ceiling), "{schedule}");
    // Both processes pace at it: each one's gauge says so (a refusal cuts
    // the rate by 0.85 until it climbs back, as the docs say).
    let floor = 9.0 * 0.85_f64.powi(i32::try_from(refused).unwrap_or(i32::MAX));
    for url in &urls {
        let rate = value(
            &scrape(url)?,
            "baton_llm_limit_rate",
            &[("model", "stand-in")],
        );
        assert!(
            (floor..=10.5).contains(&rate),
            "{url}: {rate}, {refused} refused"
        );
    }
    // baton doctor says what the rate is and where it comes from.
    let doctor = doctor(&system)?;
    let line = doctor
        .lines()
        .find(|l| l.contains("limits") && l.contains("stand-in"))
        .with_context(|| format!("no limits line in:\n{doctor}"))?;
    assert!(line.contains("headers heard: x-ratelimit"), "{line}");
    // 10 a second, to what the readings allow (a reset written to the
    // millisecond).
    assert!(
        line.contains("under 10.00/s") || line.contains("under 10.01/s"),
        "{line}"
    );
    Ok(())
}

/// What `baton doctor` prints (its exit status aside: a test server has
/// warnings of its own).
pub(super) fn doctor(system: &System) -> anyhow::Result<String> {
    let output =
        tokio::task::block_in_place(|| system.baton(&["doctor", "--timeout-ms", "500"]).output())?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// When a call came, and the status it got.
type Call = (Instant, u16);

/// A model that refuses the first call with 429 and `Retry-After`, as
/// `retry_after` says at that moment, then answers; it records when each
/// call came.
fn refusing_once(retry_after: fn() -> String) -> (FakeLlm, Arc<Mutex<Vec<Call>>>) {
    let refused_once = AtomicUsize::new(0);
    let times = Arc::new(Mutex::new(Vec::<Call>::new()));
    let recorded = times.clone();
    let llm = FakeLlm::responding(move |_| {
        let first = refused_once.fetch_add(1, Ordering::SeqCst) == 0;
        recorded
            .lock()
            .unwrap()
            .push((Instant::now(), if first { 429 } else { 200 }));
        if first {
            Scripted::error(429, &[("Retry-After", &retry_after())])
        } else {
            Scripted::text("done")
        }
    })
    .expect("the stand-in model starts");
    (llm, times)
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_in_seconds_or_as_an_http_date_holds_back_only_the_refused_call()
-> anyhow::Result<()> {
    let seconds: fn() -> String = || "2".to_owned();
    // An HTTP date counts whole seconds: 3 s ahead is at least 2 s.
    let date: fn() -> String =
        || httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3));
    for (form, retry_after) in [("seconds", seconds), ("HTTP date", date)] {
        let (llm, times) = refusing_once(retry_after);
        let dir = tempfile::tempdir()?;
        let limits = "\n[llm.limits]\nrequests_per_minute = 600\n";
        let spec = spec(dir.path(), "thinker", &llm, limits)?;
        let mut system = System::start().await?;
        let urls = workers(&mut system, "thinker", &spec, 2).await?;
        let sessions = submit(&system, "thinker", 6).await?;
        let ends = ends(&system, &sessions, Duration::from_secs(30)).await?;
        assert!(
            ends.iter().all(|e| e.kind == EventType::Completed),
            "{form}"
        );
        let times = times.lock().unwrap().clone();
        assert_eq!(times.len(), 7, "{form}: six answers and the one refusal");
        let (refused_at, status) = times[0];
        assert_eq!(status, 429);
        let after: Vec<Duration> = times[1..]
            .iter()
            .map(|(at, _)| at.duration_since(refused_at))
            .collect();
        // The refused call waited out its Retry-After; the other five did
        // not wait for it (they go on at the paced rate, which a 429 keeps
        // from climbing: about 4 a second, so within 1.9 s).
        assert_eq!(
            after
                .iter()
                .filter(|a| **a >= Duration::from_millis(1900))
                .count(),
            1,
            "{form}: {after:?}"
        );
        assert_eq!(
            after
                .iter()
                .filter(|a| **a < Duration::from_millis(1900))
                .count(),
            5,
            "{form}: {after:?}"
        );
        assert_eq!(summed(&urls, "baton_llm_refusals_total")?, 1.0, "{form}");
        // Made again in its hop: no session was retried.
        for session in &sessions {
            let history = system.client.history(*session).await?;
            assert!(
                history.iter().all(|e| e.kind != EventType::Retrying),
                "{form}"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_deadline_passes_while_rate_limited_fails_rate_limited()
-> anyhow::Result<()> {
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let llm = FakeLlm::responding(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        let mut refusal = Scripted::error(429, &[("Retry-After", "1")]);
        refusal.body =
            serde_json::json!({"error": {"message": "slow down: 10 requests per second"}});
        refusal
    })?;
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 1).await?;
    let mut task = Envelope::task("question");
    task.deadline = Some(baton_proto::now_ms() + 3_500);
    system
        .client
        .submit_to(&AgentName::new("thinker")?, &task)
        .await?;
    let events = system
        .session_events(task.session, Duration::from_secs(30))
        .await?;
    let end = events.last().context("no events")?;
    assert_eq!(end.kind, EventType::Failed, "{events:?}");
    assert_eq!(
        end.reason.as_ref().map(|r| r.as_str()),
        Some("rate_limited"),
        "{end:?}"
    );
    let detail = end.detail.clone().unwrap_or_default();
    assert!(
        detail.contains("slow down: 10 requests per second"),
        "{detail}"
    );
    // It kept asking, a second apart, until the deadline: not failed at the
    // first refusal, and not retried as a new attempt.
    let asked = asked.load(Ordering::SeqCst);
    assert!((2..=4).contains(&asked), "{asked} calls");
    assert!(events.iter().all(|e| e.kind != EventType::Retrying));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_rate_limit_headers_are_ignored_with_a_warning() -> anyhow::Result<()> {
    let calls = AtomicUsize::new(0);
    let llm = FakeLlm::responding(move |_| {
        let bad = [
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "-3"),
            ("x-ratelimit-reset-requests", "soon"),
        ];
        let mut answer = if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            Scripted::error(429, &[("Retry-After", "whenever")])
        } else {
            Scripted::text("done")
        };
        answer.headers.extend(Scripted::error(200, &bad).headers);
        answer
    })?;
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 1).await?;
    let sessions = submit(&system, "thinker", 3).await?;
    let ends = ends(&system, &sessions, Duration::from_secs(30)).await?;
    assert!(ends.iter().all(|e| e.kind == EventType::Completed));
    system
        .wait_log(
            "thinker-0",
            "ignoring a Retry-After header",
            Duration::from_secs(5),
        )
        .await?;
    system
        .wait_log("thinker-0", "x-ratelimit", Duration::from_secs(5))
        .await?;
    let schedule = schedule(&system).await?;
    assert_eq!(schedule["source"], "adaptive", "{schedule}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_types_that_share_a_model_take_turns() -> anyhow::Result<()> {
    let (llm, seen) = limited_model(100, "1");
    let dir = tempfile::tempdir()?;
    // 10 a second for both together.
    let limits = "\n[llm.limits]\nrequests_per_minute = 600\n";
    let busy = spec(dir.path(), "busy", &llm, limits)?;
    let quiet = spec(dir.path(), "quiet", &llm, limits)?;
    let mut system = System::start().await?;
    // Three processes of the busy type, one of the quiet type.
    workers(&mut system, "busy", &busy, 3).await?;
    workers(&mut system, "quiet", &quiet, 1).await?;
    // The busy type's 60 tasks are queued first.
    let mut sessions = submit(&system, "busy", 60).await?;
    sessions.extend(submit(&system, "quiet", 10).await?);
    ends(&system, &sessions, Duration::from_secs(60)).await?;
    let times = seen.times.lock().unwrap().clone();
    assert_eq!(times.len(), 70, "one call per session");
    // Taking turns, the quiet type gets half the calls while both ask: its
    // 10 are among the first 25, not one in four behind the busy type's.
    let quiet_early = times[..25]
        .iter()
        .filter(|(_, _, who)| who == "quiet")
        .count();
    assert!(
        quiet_early >= 8,
        "only {quiet_early} of the quiet type's calls in the first 25"
    );
    Ok(())
}

//! Shared model rate limits: worker processes of one or more agent types
//! take turns from one schedule in NATS, so a provider's per-account limit
//! holds however many workers run. The stand-in model enforces the limit
//! (429 with `Retry-After` above it) and counts every request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_proto::{AgentName, Envelope, Event, EventType};
use baton_testkit::{FakeLlm, Scripted, eventually};

use crate::metrics::{metrics_url, scrape, value};
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
    let window = Mutex::new(std::collections::VecDeque::<Instant>::new());
    let counted = seen.clone();
    let llm = FakeLlm::responding(move |body| {
        let now = Instant::now();
        let asker = body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut window = window.lock().unwrap();
        while window
            .front()
            .is_some_and(|at| now.duration_since(*at) >= Duration::from_secs(1))
        {
            window.pop_front();
        }
        let admitted = window.len() < per_second;
        counted.times.lock().unwrap().push((now, admitted, asker));
        if admitted {
            window.push_back(now);
            counted.answered.fetch_add(1, Ordering::SeqCst);
            Scripted::text("done").with_usage("stand-in", 10, 1)
        } else {
            counted.refused.fetch_add(1, Ordering::SeqCst);
            Scripted::error(429, &[("Retry-After", retry_after)])
        }
    })
    .expect("the stand-in model starts");
    (llm, seen)
}

/// An LLM spec for agent type `name` on `llm`, `limits` in `[llm.limits]`.
fn spec(dir: &std::path::Path, name: &str, llm: &FakeLlm, limits: &str) -> anyhow::Result<String> {
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
async fn workers(
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
fn summed(urls: &[String], name: &str) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for url in urls {
        sum += value(&scrape(url)?, name, &[("model", "stand-in")]);
    }
    Ok(sum)
}

/// Submits `count` tasks to `agent` and returns their sessions.
async fn submit(system: &System, agent: &str, count: usize) -> anyhow::Result<Vec<uuid::Uuid>> {
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
async fn ends(
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
    let bucket = system
        .client
        .jetstream()
        .get_key_value("BATON_LIMITS")
        .await?;
    let mut keys = bucket.keys().await?;
    let key = futures::StreamExt::next(&mut keys).await.transpose()?;
    assert!(key.is_some_and(|k| k.contains("stand-in")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_shared_limit_the_same_load_meets_the_providers_limit() -> anyhow::Result<()> {
    // The comparison the shared limit is for: the same stand-in and load
    // without `[llm.limits]`, each worker retrying on its own.
    let (llm, seen) = limited_model(10, "1");
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), "thinker", &llm, "")?;
    let mut system = System::start().await?;
    workers(&mut system, "thinker", &spec, 2).await?;
    submit(&system, "thinker", 60).await?;
    eventually(Duration::from_secs(20), || async {
        let refused = seen.refused.load(Ordering::SeqCst);
        if refused >= 20 {
            Ok(())
        } else {
            Err(format!("{refused} refused so far"))
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_pauses_every_worker_and_the_call_is_made_again_within_its_hop() -> anyhow::Result<()>
{
    // The provider refuses the first call, saying to wait 2 s.
    let refused_once = AtomicUsize::new(0);
    let times = Arc::new(Mutex::new(Vec::<(Instant, u16)>::new()));
    let recorded = times.clone();
    let llm = FakeLlm::responding(move |_| {
        let first = refused_once.fetch_add(1, Ordering::SeqCst) == 0;
        let status = if first { 429 } else { 200 };
        recorded.lock().unwrap().push((Instant::now(), status));
        if first {
            Scripted::error(429, &[("Retry-After", "2")])
        } else {
            Scripted::text("done")
        }
    })?;
    let dir = tempfile::tempdir()?;
    let limits = "\n[llm.limits]\nrequests_per_minute = 600\n";
    let spec = spec(dir.path(), "thinker", &llm, limits)?;
    let mut system = System::start().await?;
    let urls = workers(&mut system, "thinker", &spec, 2).await?;
    let sessions = submit(&system, "thinker", 6).await?;
    let ends = ends(&system, &sessions, Duration::from_secs(30)).await?;
    assert!(ends.iter().all(|e| e.kind == EventType::Completed));
    let times = times.lock().unwrap().clone();
    assert_eq!(times.len(), 7, "six answers and the one refusal");
    let (refused_at, _) = times[0];
    assert_eq!(times[0].1, 429);
    // No worker called during the pause, the other process included.
    for (at, status) in &times[1..] {
        assert_eq!(*status, 200);
        let after = at.duration_since(refused_at);
        assert!(
            after >= Duration::from_millis(1900),
            "a call {after:?} after the 429"
        );
    }
    // Counted: the refusal, and seven turns taken (six calls and the one
    // made again).
    assert_eq!(summed(&urls, "baton_llm_refusals_total")?, 1.0);
    assert_eq!(summed(&urls, "baton_llm_limit_wait_seconds_count")?, 7.0);
    // The refused call was made again in its hop: no session was retried.
    for session in &sessions {
        let history = system.client.history(*session).await?;
        assert!(history.iter().all(|e| e.kind != EventType::Retrying));
    }
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

//! `baton bench --ttft`: time to first token. A streaming stand-in model
//! writes its first piece of text a fixed time after a request, then the
//! rest. The same model is asked directly by an HTTP client (the baseline),
//! then through a worker process of an LLM agent type, one session at a
//! time, the first `delta` read by a client of the session's live events.
//! Every clock is this process's, so the figures compare.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_client::Client;
use baton_proto::{AgentName, Delta, Envelope, Event, EventType, Subjects, Wire};
use futures::StreamExt as _;

use super::quantile as percentile;
use super::scale::{ScaleOut, start_workers};

/// How long the stand-in thinks before its first token.
const THINK: Duration = Duration::from_millis(20);
/// The pieces after the first, and the time between two.
const PIECES: usize = 10;
const BETWEEN: Duration = Duration::from_millis(2);

/// What the stand-in saw of request `n`: when it came, when its first
/// token went out.
#[derive(Default, Clone, Copy)]
struct Seen {
    arrived: Option<Instant>,
    first: Option<Instant>,
}

type Log = Arc<Mutex<HashMap<u64, Seen>>>;

/// Runs the baseline and Baton, `tasks` sessions each, and prints both.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64) -> anyhow::Result<()> {
    let log = Log::default();
    let model = stand_in(log.clone()).await?;
    println!(
        "ttft bench: a streaming stand-in model that writes its first token {THINK:?} after a request, then {PIECES} more {BETWEEN:?} apart; {tasks} requests asked directly, then {tasks} sessions through one LLM worker, one at a time"
    );
    let direct = direct(&model, tasks).await?;
    let (own, through, dispatch, relay) = through_baton(bench, &model, &log, tasks).await?;
    println!();
    println!("{:<34} {:>8} {:>8}", "", "p50 ms", "p99 ms");
    let row = |label: &str, values: &[f64]| {
        println!(
            "{label:<34} {:>8.2} {:>8.2}",
            percentile(values, 0.50),
            percentile(values, 0.99)
        );
    };
    row("model's own (request to 1st token)", &own);
    row("direct HTTP client", &direct);
    row("through Baton, at the client", &through);
    let above: Vec<f64> = through
        .iter()
        .zip(&own)
        .map(|(client, model)| client - model)
        .collect();
    row("  above the model's own", &above);
    row("    dispatch (send to model asked)", &dispatch);
    row("    relay (token out to client)", &relay);
    println!(
        "ratio through Baton / direct (p50): {:.2}; target: above the model's own <= 10 ms at p50",
        percentile(&through, 0.5) / percentile(&direct, 0.5).max(f64::EPSILON)
    );
    Ok(())
}

/// Each request's time to its first token, asked directly, in ms.
async fn direct(model: &str, tasks: u64) -> anyhow::Result<Vec<f64>> {
    let http = reqwest::Client::new();
    let mut times = Vec::new();
    for n in 0..tasks {
        let body = serde_json::json!({"model": "stand-in", "stream": true,
            "messages": [{"role": "user", "content": format!("direct {n}")}]});
        let sent = Instant::now();
        let mut response = http
            .post(format!("{model}/chat/completions"))
            .json(&body)
            .send()
            .await?;
        let mut seen = String::new();
        while let Some(chunk) = response.chunk().await? {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("\"content\":\"") {
                times.push(ms(sent.elapsed()));
                break;
            }
        }
        while response.chunk().await?.is_some() {}
    }
    Ok(times)
}

/// Through a worker: per session, the model's own time to its first token,
/// the client's, the time from sending to the model being asked, and from
/// the token going out to the client having it, in ms.
async fn through_baton(
    bench: &ScaleOut<'_>,
    model: &str,
    log: &Log,
    tasks: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>)> {
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("writer.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"writer\"\nkind = \"llm\"\n\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n"
        ),
    )?;
    let prefix = "ttft";
    let subjects = Subjects::new(prefix)?;
    let _workers = start_workers(bench, &spec, ("writer", prefix), 1, true).await?;
    let baton = Client::new(bench.client.clone(), subjects.clone());
    let agent = AgentName::new("writer")?;
    let mut live = bench.client.subscribe(subjects.all_live()).await?;
    let mut events = bench.client.subscribe(subjects.all_events()).await?;
    let (mut own, mut through, mut dispatch, mut relay) = (vec![], vec![], vec![], vec![]);
    for n in 0..tasks {
        let mut task = Envelope::task(format!("question {n}"));
        task.stream = true;
        let sent = Instant::now();
        baton.submit_to(&agent, &task).await?;
        let first = first_delta(&mut live, task.session).await?;
        ended(&mut events, task.session).await?;
        let seen = log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&n)
            .copied()
            .unwrap_or_default();
        let (Some(arrived), Some(written)) = (seen.arrived, seen.first) else {
            anyhow::bail!("the stand-in did not see question {n}");
        };
        own.push(ms(written.saturating_duration_since(arrived)));
        through.push(ms(first.saturating_duration_since(sent)));
        dispatch.push(ms(arrived.saturating_duration_since(sent)));
        relay.push(ms(first.saturating_duration_since(written)));
    }
    Ok((own, through, dispatch, relay))
}

/// When the first `delta` of `session` arrived.
async fn first_delta(
    live: &mut async_nats::Subscriber,
    session: uuid::Uuid,
) -> anyhow::Result<Instant> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), live.next())
            .await
            .ok()
            .flatten()
            .ok_or_else(|| anyhow::anyhow!("no piece of session {session}'s answer came"))?;
        let at = Instant::now();
        let event = Event::from_msgpack(&message.payload)?;
        if event.session == session && Delta::of(&event).is_some() {
            return Ok(at);
        }
    }
}

/// Waits for the end of `session`, which must complete.
async fn ended(events: &mut async_nats::Subscriber, session: uuid::Uuid) -> anyhow::Result<()> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .ok()
            .flatten()
            .ok_or_else(|| anyhow::anyhow!("session {session} did not end"))?;
        let event = Event::from_msgpack(&message.payload)?;
        if event.session == session && event.kind.is_terminal() {
            anyhow::ensure!(
                event.kind == EventType::Completed,
                "session {session} failed: {:?}",
                event.detail
            );
            return Ok(());
        }
    }
}

/// A streaming OpenAI-compatible stand-in on a free loopback port: it
/// logs, by the number at the end of the last message (`question 7`), when
/// a request came and when its first token went out.
async fn stand_in(log: Log) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let answer = move |axum::Json(body): axum::Json<serde_json::Value>| {
        let log = log.clone();
        async move {
            let arrived = Instant::now();
            let asked = body["messages"]
                .as_array()
                .and_then(|messages| messages.last())
                .and_then(|message| message["content"].as_str())
                .unwrap_or_default()
                .to_owned();
            let number = asked
                .strip_prefix("question ")
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(n) = number {
                lock(&log).entry(n).or_default().arrived = Some(arrived);
            }
            let pieces = futures::stream::unfold(0usize, move |index| {
                let log = log.clone();
                async move {
                    if index > PIECES + 1 {
                        return None;
                    }
                    let text = match index {
                        0 => {
                            tokio::time::sleep(THINK).await;
                            chunk("word ")
                        }
                        i if i <= PIECES => {
                            tokio::time::sleep(BETWEEN).await;
                            chunk("word ")
                        }
                        _ => "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":11,\"total_tokens\":16}}\n\ndata: [DONE]\n\n".to_owned(),
                    };
                    if index == 0 {
                        if let Some(n) = number {
                            lock(&log).entry(n).or_default().first = Some(Instant::now());
                        }
                    }
                    Some((Ok::<_, std::convert::Infallible>(text), index + 1))
                }
            });
            (
                [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                axum::body::Body::from_stream(pieces),
            )
        }
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    // Each piece goes out as it is written, as a provider's does.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

fn lock(log: &Log) -> std::sync::MutexGuard<'_, HashMap<u64, Seen>> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One SSE chunk with `text`.
fn chunk(text: &str) -> String {
    let chunk = serde_json::json!({"object": "chat.completion.chunk", "model": "stand-in",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

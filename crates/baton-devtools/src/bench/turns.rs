//! `baton bench --turns`: what a conversation's turn costs through
//! `baton a2a serve`, with an instant stand-in model. A plain HTTP client
//! sends blocking `SendMessage` calls, one at a time:
//!
//! - **model alone**: the stand-in asked directly, the floor;
//! - **one agent, no gateway**: a task to `desk` through the router, sent
//!   and followed by a client in this process (Baton without A2A and
//!   without conversations);
//! - **one agent, new conversation**: a message to `/agents/desk` without a
//!   context, one LLM hop (what a one-shot task costs);
//! - **next turn, to the holder**: turns 2 and later of conversations whose
//!   first turn went to `front`, which handed it to `desk`: `desk` holds
//!   each conversation, and the turn goes straight there, with the
//!   transcript so far;
//! - **first turn across a handoff**: that first turn, `front` to `desk`.
//!
//! Every call, on every side, is made 50 ms after the one before it ended
//! (a person reads an answer before writing again), unmeasured, so every
//! side starts equally rested. Router, workers and gateway are real `baton`
//! processes on this server.
//! It reports medians and p99 and the ratio of the holder's turn to the
//! one-agent message. It asserts nothing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{Value, json};

use super::quantile;
use super::scale::{ScaleOut, Worker, start_workers};

/// The conversations' turns after the first.
const LATER_TURNS: usize = 4;

/// The pause before every call (not measured): no person answers faster,
/// and every side gets the same, so the ratios compare like with like.
const THINK: Duration = Duration::from_millis(50);

/// Runs the sides, `tasks` calls each, and prints them.
pub(super) async fn run(bench: &ScaleOut<'_>, tasks: u64) -> anyhow::Result<()> {
    let model = stand_in().await?;
    let dir = tempfile::tempdir()?;
    let llm = format!(
        "\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n"
    );
    let front = dir.path().join("front.toml");
    std::fs::write(
        &front,
        format!("name = \"front\"\nkind = \"llm\"\n\n[[handoffs]]\nto = \"desk\"\n{llm}"),
    )?;
    let desk = dir.path().join("desk.toml");
    std::fs::write(&desk, format!("name = \"desk\"\nkind = \"llm\"\n{llm}"))?;
    let prefix = "turns";
    let _front = start_workers(bench, &front, ("front", prefix), 1, true).await?;
    let _desk = start_workers(bench, &desk, ("desk", prefix), 1, true).await?;
    let _router = spawn(
        bench,
        prefix,
        &["router", "--default-agent", "front", "--no-registry"],
    )?;
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let _gateway = spawn(bench, prefix, &["a2a", "serve", "--listen", &listen])?;
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();
    ready(&http, &url).await?;
    println!(
        "turns bench: blocking A2A SendMessage calls from a plain HTTP client to baton a2a serve, one at a time, with an instant stand-in model; {tasks} calls per side"
    );
    // Warm up every path once.
    let warm = send(&http, &format!("{url}/agents/desk"), None).await?;
    send(&http, &url, None).await?;
    send(&http, &url, Some(&warm.1)).await?;

    let direct = model_alone(&http, &model, tasks).await?;
    let plain = without_gateway(bench, prefix, tasks).await?;
    let mut single = Vec::new();
    for _ in 0..tasks {
        tokio::time::sleep(THINK).await;
        single.push(send(&http, &format!("{url}/agents/desk"), None).await?.0);
    }
    let (first, later) = conversations(&http, &url, tasks).await?;
    println!();
    println!("{:<40} {:>8} {:>8} {:>8}", "", "calls", "p50 ms", "p99 ms");
    let row = |label: &str, values: &[f64]| {
        println!(
            "{label:<40} {:>8} {:>8.2} {:>8.2}",
            values.len(),
            quantile(values, 0.50),
            quantile(values, 0.99)
        );
    };
    row("model alone (HTTP, direct)", &direct);
    row("one agent, no gateway (client here)", &plain);
    row("one agent, new conversation", &single);
    row("next turn, to the holder", &later);
    row("first turn across a handoff", &first);
    println!(
        "holder turn / one agent (p50): {:.2}; goal: the holder's turn <= 5 ms at p50",
        quantile(&later, 0.5) / quantile(&single, 0.5).max(f64::EPSILON)
    );
    Ok(())
}

/// The stand-in asked directly, `tasks` times: each call's time in ms.
async fn model_alone(http: &reqwest::Client, model: &str, tasks: u64) -> anyhow::Result<Vec<f64>> {
    let mut direct = Vec::new();
    for _ in 0..tasks {
        tokio::time::sleep(THINK).await;
        let sent = Instant::now();
        ask_model(http, model).await?;
        direct.push(ms(sent.elapsed()));
    }
    Ok(direct)
}

/// `tasks` tasks to `desk` through the router, sent and followed by a
/// client in this process: each one's time in ms.
async fn without_gateway(
    bench: &ScaleOut<'_>,
    prefix: &str,
    tasks: u64,
) -> anyhow::Result<Vec<f64>> {
    let baton =
        baton_client::Client::new(bench.client.clone(), baton_proto::Subjects::new(prefix)?);
    let mut plain = Vec::new();
    for n in 0..tasks {
        let task = baton_proto::Envelope::task(format!("plain {n}"))
            .with_to(baton_proto::AgentName::from_static("desk"));
        tokio::time::sleep(THINK).await;
        let sent = Instant::now();
        baton.submit(&task).await?;
        let end = baton.wait(task.session, Duration::from_secs(30)).await?;
        plain.push(ms(sent.elapsed()));
        anyhow::ensure!(end.kind == baton_proto::EventType::Completed, "{end:?}");
    }
    Ok(plain)
}

/// Conversations of 1 + [`LATER_TURNS`] turns through the ingress, about
/// `tasks` later turns in all: the first turns' times and the later
/// turns', in ms.
async fn conversations(
    http: &reqwest::Client,
    url: &str,
    tasks: u64,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let (mut first, mut later) = (Vec::new(), Vec::new());
    for _ in 0..tasks.div_ceil(LATER_TURNS as u64) {
        tokio::time::sleep(THINK).await;
        let (took, context) = send(http, url, None).await?;
        first.push(took);
        for _ in 0..LATER_TURNS {
            tokio::time::sleep(THINK).await;
            later.push(send(http, url, Some(&context)).await?.0);
        }
    }
    Ok((first, later))
}

/// A blocking `SendMessage` to `url`, in `context` (a new conversation
/// without one): how long it took in ms, and the context.
pub(super) async fn send(
    http: &reqwest::Client,
    url: &str,
    context: Option<&str>,
) -> anyhow::Result<(f64, String)> {
    say(http, url, context, "Hello.").await
}

/// [`send`] with `text`.
pub(super) async fn say(
    http: &reqwest::Client,
    url: &str,
    context: Option<&str>,
    text: &str,
) -> anyhow::Result<(f64, String)> {
    let mut message = a2a::Message::new(a2a::Role::User, vec![a2a::Part::text(text)]);
    message.context_id = context.map(str::to_owned);
    let request = a2a::SendMessageRequest {
        message,
        configuration: None,
        metadata: None,
        tenant: None,
    };
    let call = a2a::JsonRpcRequest::new(
        a2a::JsonRpcId::Number(1),
        a2a::methods::SEND_MESSAGE,
        Some(serde_json::to_value(&request)?),
    );
    let sent = Instant::now();
    let answer: Value = http.post(url).json(&call).send().await?.json().await?;
    let took = ms(sent.elapsed());
    let task = &answer["result"]["task"];
    anyhow::ensure!(
        task["status"]["state"] == "TASK_STATE_COMPLETED",
        "a turn did not complete: {answer}"
    );
    let context = task["contextId"].as_str().unwrap_or_default().to_owned();
    Ok((took, context))
}

/// Waits until the gateway answers its card.
pub(super) async fn ready(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let card = http
            .get(format!("{url}/.well-known/agent-card.json"))
            .send()
            .await;
        if card.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the A2A gateway did not start within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One chat completion from the stand-in.
async fn ask_model(http: &reqwest::Client, model: &str) -> anyhow::Result<()> {
    let body = json!({"model": "stand-in", "messages": [{"role": "user", "content": "Hello."}]});
    let answer: Value = http
        .post(format!("{model}/chat/completions"))
        .json(&body)
        .send()
        .await?
        .json()
        .await?;
    anyhow::ensure!(answer["choices"][0]["message"].is_object(), "{answer}");
    Ok(())
}

/// A `baton` process with `args` on subject prefix `prefix`, quiet.
pub(super) fn spawn(bench: &ScaleOut<'_>, prefix: &str, args: &[&str]) -> anyhow::Result<Worker> {
    let child = Command::new(std::env::current_exe()?)
        .args(["--nats-url", bench.url, "--prefix", prefix])
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start baton {}", args.join(" ")))?;
    Ok(Worker(child))
}

/// A loopback port free now.
pub(super) fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// An instant OpenAI-compatible stand-in: it hands off (`transfer_to_desk`)
/// when it is offered that tool, else answers `done`; its base URL.
async fn stand_in() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let answer = |axum::Json(body): axum::Json<Value>| async move {
        let offered = body["tools"].as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|tool| tool["function"]["name"] == "transfer_to_desk")
        });
        if !offered {
            return axum::Json(super::scale::answer());
        }
        axum::Json(json!({
            "id": "chatcmpl-stand-in",
            "object": "chat.completion",
            "model": "stand-in",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "",
                "tool_calls": [{"id": "call-1", "type": "function", "function": {
                    "name": "transfer_to_desk", "arguments": "{\"reason\": \"desk\"}"}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }))
    };
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(answer));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

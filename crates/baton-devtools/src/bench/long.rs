//! `baton bench --long-conversation`: what a turn costs as one conversation
//! grows, through `baton a2a serve`, with an instant stand-in model that
//! answers 1,500 bytes to each 500-byte message (about the size of a
//! customer-service exchange; every text is different words, so that it
//! compresses as prose does). It reports, at turns 1, 10, 100 and the
//! last:
//!
//! - the bytes of the turn's task as published to the agent's subject
//!   (what a hop carries);
//! - the median time of ten blocking `SendMessage` calls from there on;
//!
//! and, once the turns were closed, the bytes JetStream stores for the whole
//! conversation (every stream and bucket, grown since it started) against
//! the transcript's own size (the text of its messages): on disk, the
//! streams' block files, when the bench started the server (compressed
//! streams compress each block once it is full), else as JetStream counts
//! the messages. It asserts nothing.

use std::time::Duration;

use async_nats::jetstream;
use baton_proto::{Envelope, Wire};
use futures::StreamExt;
use serde_json::json;

use super::quantile;
use super::scale::{ScaleOut, start_workers};

/// The turns of the conversation that warms the processes up, unmeasured.
const WARM_UP: usize = 50;

/// The words the bench's texts are made of.
const WORDS: [&str; 64] = [
    "order",
    "parcel",
    "refund",
    "delivery",
    "address",
    "invoice",
    "customer",
    "warehouse",
    "tracking",
    "number",
    "arrived",
    "missing",
    "damaged",
    "replacement",
    "courier",
    "week",
    "yesterday",
    "today",
    "tomorrow",
    "please",
    "check",
    "could",
    "would",
    "should",
    "since",
    "because",
    "although",
    "however",
    "the",
    "a",
    "my",
    "your",
    "our",
    "their",
    "it",
    "was",
    "is",
    "has",
    "not",
    "been",
    "still",
    "already",
    "never",
    "again",
    "before",
    "after",
    "and",
    "or",
    "but",
    "with",
    "without",
    "for",
    "from",
    "to",
    "in",
    "on",
    "at",
    "by",
    "label",
    "box",
    "store",
    "account",
    "payment",
    "card",
];

/// `len` bytes of words, different for each `seed` (a text that compresses
/// about as prose does, not a sentence repeated).
fn prose(seed: u64, len: usize) -> String {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut text = String::with_capacity(len + 16);
    while text.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(WORDS[usize::try_from(state % 64).unwrap_or(0)]);
        text.push(if state % 11 == 0 { '.' } else { ' ' });
    }
    text.truncate(len);
    text
}

/// What each message says: 500 bytes.
fn question(turn: usize) -> String {
    let mut text = format!("Turn {turn}: ");
    text.push_str(&prose(turn as u64, 500 - text.len()));
    text
}

/// What the stand-in answers, the `n`th time: 1,500 bytes.
fn answer_text(n: u64) -> String {
    prose(n.wrapping_add(1 << 40), 1500)
}

/// The bytes of each answer.
const ANSWER: usize = 1500;

/// The bound of the bounded run, in messages.
const BOUND: u32 = 40;

/// Runs one conversation of `turns` turns with the whole history, then one
/// whose agent bounds it to [`BOUND`] messages, and prints what each cost.
pub(super) async fn run(bench: &ScaleOut<'_>, turns: usize) -> anyhow::Result<()> {
    let turns = turns.max(20);
    let model = stand_in().await?;
    for (bound, prefix) in [(None, "long"), (Some(BOUND), "bounded")] {
        one(bench, (&model, turns), bound, prefix).await?;
    }
    Ok(())
}

/// One conversation of `turns` turns, its agent's history bounded to
/// `bound` messages (summarised), or not, in its own deployment `prefix`.
async fn one(
    bench: &ScaleOut<'_>,
    (model, turns): (&str, usize),
    bound: Option<u32>,
    prefix: &str,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("desk.toml");
    let history = bound.map_or_else(String::new, |most| {
        format!("\n[llm.history]\nmax_messages = {most}\n")
    });
    std::fs::write(
        &spec,
        format!(
            "name = \"desk\"\nkind = \"llm\"\n\n[llm]\nbase_url = \"{model}\"\nmodel = \"stand-in\"\nsystem_prompt = \"Answer.\"\n{history}"
        ),
    )?;
    let _desk = start_workers(bench, &spec, ("desk", prefix), 1, true).await?;
    let router = ["router", "--default-agent", "desk", "--no-registry"];
    let _router = super::turns::spawn(bench, prefix, &router)?;
    let listen = format!("127.0.0.1:{}", super::turns::free_port()?);
    let _gateway = super::turns::spawn(bench, prefix, &["a2a", "serve", "--listen", &listen])?;
    let url = format!("http://{listen}");
    let http = reqwest::Client::new();
    super::turns::ready(&http, &url).await?;
    let read = bound.map_or_else(
        || "the model reads the whole conversation".to_owned(),
        |most| format!("[llm.history] max_messages = {most}: the model reads at most {most} messages, older ones summarised"),
    );
    let read = if bench.worker_flags.contains(&"--whole-events") {
        format!("{read}; workers with --whole-events")
    } else {
        read
    };
    println!();
    println!(
        "long-conversation bench ({read}): one conversation of {turns} turns through baton a2a serve, 500-byte messages, 1,500-byte answers (and summaries) from an instant stand-in model, after {WARM_UP} turns of another that warm the processes up"
    );
    // Warm every process up first, with a conversation of its own.
    let warm = uuid::Uuid::new_v4().to_string();
    for turn in 1..=WARM_UP {
        super::turns::say(&http, &url, Some(&warm), &question(turn)).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let jetstream = jetstream::new(bench.client.clone());
    let before = stored(&jetstream, bench.store_dir).await?;
    let mut tasks = bench
        .client
        .subscribe(format!("{prefix}.agent.desk"))
        .await?;
    bench.client.flush().await?;
    let context = uuid::Uuid::new_v4().to_string();
    let mut times = Vec::with_capacity(turns);
    for turn in 1..=turns {
        let (took, _) = super::turns::say(&http, &url, Some(&context), &question(turn)).await?;
        times.push(took);
    }
    // The task of each turn, by turn.
    let mut sizes = vec![0usize; turns + 1];
    while let Ok(Some(message)) = tokio::time::timeout(Duration::from_secs(1), tasks.next()).await {
        let Ok(task) = Envelope::from_msgpack(&message.payload) else {
            continue;
        };
        if let Some(turn) = task.conversation.map(|of| of.turn as usize) {
            if let Some(size) = sizes.get_mut(turn) {
                *size = message.payload.len();
            }
        }
    }
    // The last turn is closed once its gateway saw it end.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = stored(&jetstream, bench.store_dir).await?;
    report(turns, &times, &sizes);
    let transcript = turns * (500 + ANSWER);
    print_stored(&before, &after, transcript);
    let events = baton_proto::Subjects::new(prefix)?.events_stream();
    print_events(&jetstream, &events, &context).await?;
    Ok(())
}

/// Prints the conversation `id`'s events in `stream`, by kind: how many,
/// and their bytes.
async fn print_events(
    jetstream: &jetstream::Context,
    stream: &str,
    id: &str,
) -> anyhow::Result<()> {
    use jetstream::consumer::{DeliverPolicy, pull};
    let stream = jetstream.get_stream(stream).await?;
    let mut consumer = stream
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await?;
    let mut pending = consumer.info().await?.num_pending;
    let mut messages = consumer.messages().await?;
    let mut kinds: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let mut all = Vec::new();
    while pending > 0 {
        let Some(message) = messages.next().await else {
            break;
        };
        pending -= 1;
        let message = message?;
        let Ok(event) = baton_proto::Event::from_msgpack(&message.payload) else {
            continue;
        };
        all.push((event, message.payload.len() + message.subject.len()));
    }
    // The conversation's sessions, from the events that name it.
    let sessions: std::collections::HashSet<uuid::Uuid> = all
        .iter()
        .filter(|(event, _)| event.conversation.as_ref().is_some_and(|of| of.id == id))
        .map(|(event, _)| event.session)
        .collect();
    for (event, size) in all {
        if sessions.contains(&event.session) {
            let (kind, bytes) = (event.kind.as_str().to_owned(), size);
            let kind = kinds.entry(kind).or_default();
            kind.0 += 1;
            kind.1 += bytes;
        }
    }
    println!("  its events, by kind:");
    for (kind, (count, bytes)) in kinds {
        println!("    {kind:<26} {count:>6} {bytes:>12} bytes");
    }
    Ok(())
}

/// Prints the task's bytes and the median time at turns 1, 10, 100 and
/// the last (ten turns from there, or the last ten).
fn report(turns: usize, times: &[f64], sizes: &[usize]) {
    println!();
    println!(
        "{:>8} {:>12} {:>22}",
        "turn", "task bytes", "p50 ms (10 turns)"
    );
    let mut marks = vec![1, 10, 100, turns];
    marks.retain(|mark| *mark <= turns);
    marks.dedup();
    let window = |mark: usize| {
        let start = mark.min(turns - 9);
        times[start - 1..start + 9].to_vec()
    };
    for &mark in &marks {
        println!(
            "{mark:>8} {:>12} {:>22.2}",
            sizes[mark],
            quantile(&window(mark), 0.5)
        );
    }
    let (first, last) = (window(1), window(turns));
    println!(
        "turn {turns} / turn 1: task bytes {:.2}, p50 {:.2} (goal <= 1.3 on both; the first turn's task carries no transcript reference, so turn 2 is the fairer base: {} bytes)",
        sizes[turns] as f64 / sizes[1].max(1) as f64,
        quantile(&last, 0.5) / quantile(&first, 0.5).max(f64::EPSILON),
        sizes[2],
    );
}

/// What one stream holds: its name, the bytes JetStream counts for its
/// messages, and the bytes of its block files on disk (when the bench
/// started the server and knows its store; a full block of a compressed
/// stream is compressed there, the block being written is not).
type Held = (String, u64, Option<u64>);

/// Prints what the streams grew by from `before` to `after`, by stream
/// and in all, against `transcript` bytes of text: on disk when the store
/// is known, else as JetStream counts the messages. On disk a stream may
/// shrink: a block that fills is compressed, the warm-up's part included.
fn print_stored(before: &[Held], after: &[Held], transcript: usize) {
    let signed = |bytes: u64| i64::try_from(bytes).unwrap_or(i64::MAX);
    let grown: Vec<(String, i64, Option<i64>)> = after
        .iter()
        .map(|(name, bytes, disk)| {
            let was = before.iter().find(|(n, _, _)| n == name);
            let (was_bytes, was_disk) = was.map_or((0, Some(0)), |(_, b, d)| (*b, *d));
            let disk = disk
                .zip(was_disk)
                .map(|(now, was)| signed(now) - signed(was));
            (name.clone(), signed(*bytes) - signed(was_bytes), disk)
        })
        .filter(|(_, bytes, disk)| *bytes != 0 || disk.is_some_and(|d| d != 0))
        .collect();
    let counted: i64 = grown.iter().map(|(_, bytes, _)| bytes).sum();
    let on_disk: Option<i64> = grown.iter().map(|(_, _, disk)| *disk).sum();
    let how = if on_disk.is_some() {
        "on disk (the streams' block files)"
    } else {
        "as JetStream counts its messages (the server is not this bench's)"
    };
    let total = on_disk.unwrap_or(counted);
    let text = transcript as f64;
    println!();
    println!(
        "stored for the conversation: {total} bytes {how}; its transcript's text: {transcript} bytes; stored / transcript {:.2} (goal <= 2); as JetStream counts its messages: {counted} bytes, {:.2}",
        total as f64 / text,
        counted as f64 / text,
    );
    println!("  {:<28} {:>12} {:>14}", "stream", "messages", "on disk");
    for (name, bytes, disk) in grown {
        let disk = disk.map_or_else(|| "-".to_owned(), |disk| disk.to_string());
        println!("  {name:<28} {bytes:>12} {disk:>14}");
    }
}

/// What every stream of the server holds, by name; on disk from the
/// block files under `store` when it is given.
async fn stored(
    jetstream: &jetstream::Context,
    store: Option<&std::path::Path>,
) -> anyhow::Result<Vec<Held>> {
    let mut names = jetstream.stream_names();
    let mut all = Vec::new();
    while let Some(name) = names.next().await {
        let name = name?;
        let mut stream = jetstream.get_stream(&name).await?;
        let bytes = stream.info().await?.state.bytes;
        let disk = store.map(|store| blocks(store, &name));
        all.push((name, bytes, disk));
    }
    Ok(all)
}

/// The bytes of stream `name`'s block files under the server's `store`
/// (`jetstream/<account>/streams/<name>/msgs/*.blk`, every account).
fn blocks(store: &std::path::Path, name: &str) -> u64 {
    let Ok(accounts) = std::fs::read_dir(store.join("jetstream")) else {
        return 0;
    };
    let files = accounts
        .flatten()
        .filter_map(|account| {
            std::fs::read_dir(account.path().join("streams").join(name).join("msgs")).ok()
        })
        .flatten()
        .flatten();
    files
        .filter(|file| file.path().extension().is_some_and(|ext| ext == "blk"))
        .filter_map(|file| file.metadata().ok())
        .map(|meta| meta.len())
        .sum()
}

/// An instant OpenAI-compatible stand-in that answers 1,500 bytes, a
/// different text each time; its
/// base URL. It reads each request whole but does not parse it: the time
/// a provider takes to read a long conversation is the provider's, not
/// the hop's, and parsing megabytes here would count it in the hop.
async fn stand_in() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/v1", listener.local_addr()?);
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let answer = move |_: axum::body::Bytes| {
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text = answer_text(n);
        async move {
            axum::Json(json!({
                "id": "chatcmpl-stand-in",
                "object": "chat.completion",
                "model": "stand-in",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 300, "total_tokens": 310},
            }))
        }
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(answer))
        .layer(axum::extract::DefaultBodyLimit::disable());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

//! `--context-bytes`: how Baton's cost grows with the context a task
//! carries; and the timed run both sides share.

use std::time::{Duration, Instant};

use baton_proto::{Envelope, Wire};

use baton_worker::{EventLevel, SettleMode};

use super::{BenchArgs, Mode, Recorder, baton_chain, raw_relay};

/// `--context-bytes`: for each context size, the Baton chain and (where one
/// message can hold it) the raw relay, with fewer tasks for larger contexts.
pub(super) async fn context_curve(
    client: &async_nats::Client,
    server: &str,
    args: &BenchArgs,
    sizes: &[usize],
) -> anyhow::Result<()> {
    let max_payload = client.server_info().max_payload;
    println!(
        "context-size bench: {} hops, nats-server {server} (max_payload {max_payload} bytes)",
        args.hops
    );
    println!();
    println!(
        "{:>12} {:>7} {:>10} {:>12} {:>12} {:>14} {:>8}",
        "context B", "tasks", "tasks/s", "hop p50 µs", "hop p99 µs", "raw p50 µs", "ratio"
    );
    for &size in sizes {
        // About 200 MB of context per size, at least 10 tasks.
        let tasks = u64::try_from(200_000_000 / size.max(1))
            .unwrap_or(u64::MAX)
            .clamp(10, args.tasks);
        let run = BenchArgs {
            tasks,
            hops: args.hops,
            concurrency: args.concurrency.min(8),
            payload_bytes: size,
            warmup: (tasks / 5).max(2),
            rounds: 1,
            only: None,
            context_bytes: Vec::new(),
            scale_out: false,
            all: false,
            exec: false,
            tools: false,
            limits: false,
            ttft: false,
            turns: false,
            long_conversation: false,
            whole_events: false,
            learning: false,
            limit_rps: 0,
            delay_ms: 0,
            round_secs: 0,
            server_pid: args.server_pid,
            monitor_url: args.monitor_url.clone(),
            store_dir: args.store_dir.clone(),
        };
        let mode = Mode {
            prefix: "benchcontext".to_owned(),
            settle: SettleMode::default(),
            events: EventLevel::default(),
            accepted_after: Duration::from_millis(100),
            version: None,
        };
        let baton = baton_chain(client, &run, &mode).await?;
        let payload_len = padded_task(size).to_msgpack()?.len();
        let raw = if payload_len + 1024 < max_payload {
            Some(raw_relay(client, &run, payload_len, 0, 0).await?)
        } else {
            None
        };
        let (raw_p50, ratio) = raw.map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |raw| {
                (
                    format!("{:.0}", raw.p50_us),
                    format!("{:.2}", baton.p50_us / raw.p50_us),
                )
            },
        );
        println!(
            "{size:>12} {tasks:>7} {:>10.1} {:>12.0} {:>12.0} {raw_p50:>14} {ratio:>8}",
            baton.tasks_per_sec, baton.p50_us, baton.p99_us
        );
    }
    println!("ratio: Baton's hop p50 over the raw relay's, same payload, same run");
    Ok(())
}

/// Runs the warm-up, then the measured tasks, each in a closed loop: a task is
/// submitted only when the window has room. Returns the measured duration.
pub(super) async fn measure<S, F>(
    recorder: &Recorder,
    args: &BenchArgs,
    submit_one: S,
) -> anyhow::Result<Measured>
where
    S: Fn() -> F,
    F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let submit_one = &submit_one;
    let run = |count: u64| async move {
        let mut pending = tokio::task::JoinSet::new();
        for _ in 0..count {
            recorder.slot().await;
            pending.spawn(submit_one());
            while let Some(done) = pending.try_join_next() {
                done??;
            }
        }
        while let Some(done) = pending.join_next().await {
            done??;
        }
        anyhow::Ok(())
    };
    // The warm-up also provisions streams and consumers.
    run(args.warmup).await?;
    recorder
        .wait_for(args.warmup, Duration::from_secs(120))
        .await?;
    recorder.reset();
    let received = super::cpu::bytes_in(args.monitor_url.as_deref()).await;
    let cpu = super::cpu::Sample::now(args.server_pid);
    let started = Instant::now();
    run(args.tasks).await?;
    recorder
        .wait_for(args.tasks, Duration::from_secs(600))
        .await?;
    let elapsed = started.elapsed();
    let hops = args
        .tasks
        .saturating_mul(u64::try_from(args.hops).unwrap_or(u64::MAX));
    let cpu = super::cpu::Sample::now(args.server_pid).per_hop_since(cpu, hops);
    let bytes_per_hop = match (
        received,
        super::cpu::bytes_in(args.monitor_url.as_deref()).await,
    ) {
        (Some(before), Some(after)) if hops > 0 => {
            after.saturating_sub(before) as f64 / hops as f64
        }
        _ => f64::NAN,
    };
    Ok(Measured {
        elapsed,
        cpu,
        bytes_per_hop,
    })
}

/// What one measured run took: its time, and the CPU the bench's process
/// and its server spent per hop meanwhile (µs; NaN when unknown).
pub(super) struct Measured {
    pub(super) elapsed: Duration,
    pub(super) cpu: (f64, f64),
    /// Bytes into the server per hop (NaN when unknown).
    pub(super) bytes_per_hop: f64,
}

pub(super) fn padded_task(payload_bytes: usize) -> Envelope {
    let task = Envelope::task("bench");
    let base = task.to_msgpack().map(|b| b.len()).unwrap_or(0);
    task.with_variable("pad", "x".repeat(payload_bytes.saturating_sub(base + 8)))
}

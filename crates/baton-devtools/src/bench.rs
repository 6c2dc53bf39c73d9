//! `baton bench`: N tasks through a chain of K no-op agents, and in the same
//! run a raw async-nats JetStream relay with the same payload size, chain
//! length and concurrency (consume, publish next, await PubAck, ack).
//!
//! Two more baselines are the raw relay doing the durable work of a Baton
//! hop by hand: "raw, same writes" stores one event per hop (what Baton's
//! `full` level stores for a quick hop, whose `accepted` is folded into its
//! `handoff`), "raw, 3 writes" two (both stored on their own), each on a
//! per-task subject of a file-backed events stream, every message with a
//! `Nats-Msg-Id`, every PubAck awaited, then a plain ack. Baton's ratio to
//! them is the cost of the runtime itself; its ratio to the plain relay is
//! the cost of the guarantees. Baton runs with its defaults, and once each
//! with one setting changed: unfolded, confirmed acks, `lean` events. Every
//! side counts its durable writes per hop in its streams.
//!
//! The sides take turns, `--rounds` times over (3 by default), each round on
//! fresh streams; the table shows medians over the rounds, and each ratio is
//! the median of the rounds' ratios, so drift in the machine's speed during
//! the run moves both sides of a ratio alike.
//!
//! Per-hop latency is measured on one monotonic clock shared by every stage:
//! from the moment a stage decides to forward to the moment the next stage
//! starts handling. It is a benchmark: it reports, it asserts nothing.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use baton_client::Client;
use baton_proto::{AgentName, Reason, Subjects, Value, Wire};
use baton_worker::{
    Agent, AgentError, EventLevel, Outcome, RetryPolicy, SettleMode, Task, Worker, WorkerConfig,
};
use clap::Args;
use context::{Measured, context_curve, measure, padded_task};
use report::{print_ratios, print_sides};
use tokio_util::sync::CancellationToken;

/// What `baton bench` measures.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Tasks to run through the chain.
    #[arg(long, default_value_t = 2000)]
    pub tasks: u64,

    /// Agents in the chain (hops per task).
    #[arg(long, default_value_t = 3)]
    pub hops: usize,

    /// Tasks in flight end to end (closed loop), and the concurrency of every stage, for both sides.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,

    /// Approximate payload size in bytes (the raw relay uses the encoded size of Baton's envelope).
    #[arg(long, default_value_t = 512)]
    pub payload_bytes: usize,

    /// Tasks run first and not measured.
    #[arg(long, default_value_t = 200)]
    pub warmup: u64,

    /// How many times every side runs, the sides taking turns (raw, Baton, raw, …),
    /// each time with --tasks tasks on fresh streams. The table shows each side's
    /// median and each ratio's median over the rounds, so a machine whose speed
    /// drifts during the run moves both sides of a ratio alike.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub rounds: u64,

    /// Run only one side (for profiling); the ratios need the others.
    #[arg(long, value_parser = ["raw", "same-writes", "three-writes", "baton", "baton-unfolded", "baton-confirmed", "baton-lean", "baton-versioned"])]
    pub only: Option<String>,

    /// Instead of one run, measure the per-hop cost at each of these context sizes in
    /// bytes, e.g. 10000,100000,1000000,10000000. Contexts over half the server's
    /// max_payload go through the claim-check; the raw relay runs where one message holds
    /// the payload. With --all, the sizes of the curve that follows the main table.
    #[arg(long, value_delimiter = ',', value_name = "BYTES,...")]
    pub context_bytes: Vec<usize>,

    /// Instead of one run, serve an LLM-like agent type (a local OpenAI-compatible
    /// stand-in that answers after --delay-ms) with 1, 2 and 4 worker processes, and
    /// report tasks/s against the ideal N × --concurrency / delay.
    #[arg(long)]
    pub scale_out: bool,

    /// With --scale-out: how long the stand-in model takes to answer, in ms.
    #[arg(long, default_value_t = 200)]
    pub delay_ms: u64,

    /// With --scale-out: how long each round runs at the ideal rate, in seconds.
    #[arg(long, default_value_t = 10)]
    pub round_secs: u64,

    /// Print every figure in one invocation: the main table, then
    /// --scale-out (with --delay-ms, --round-secs and --concurrency), then the context
    /// curve (--context-bytes, by default 10000,100000,1000000,10000000).
    #[arg(long, conflicts_with_all = ["only", "scale_out", "exec"])]
    pub all: bool,

    /// Instead of one run, run --tasks tasks through an exec agent (Python) started per
    /// task, then through the same agent run persistent, and report both and the ratio.
    #[arg(long)]
    pub exec: bool,

    /// Instead of one run, measure one MCP tool call through an LLM agent (a stand-in
    /// model and an echo MCP server, in process) against calling the server directly,
    /// and the hop journal's cost per entry, with --tasks tasks per side.
    #[arg(long)]
    pub tools: bool,

    /// Instead of one run, send --tasks tasks (default here 300) to 4 worker processes of
    /// an LLM agent type at --concurrency, against a stand-in model that allows --limit-rps
    /// requests in any second and answers 429 above it, six ways: a) [llm.limits] at its
    /// limit; b) no limit with the provider's x-ratelimit headers; c) no limit and no
    /// headers; d) [llm.limits] at twice its limit; e) no limit, OpenAI's headers for a
    /// continuous bucket; f) no limit, Anthropic's headers. Reports sessions completed,
    /// 429s and throughput as a fraction of the limit. Then g) one conversation of 40 turns
    /// through baton a2a serve on a fresh deployment with an instant unlimited model: the
    /// p50 of its last 20 turns over that of turns 2-21.
    #[arg(long)]
    pub limits: bool,

    /// Instead of one run, measure the time to the first token of an answer: a streaming
    /// stand-in model asked directly by an HTTP client, then through an LLM worker with a
    /// client reading the session's live pieces, --tasks (default here 100) one at a time.
    #[arg(long)]
    pub ttft: bool,

    /// Instead of one run, measure whether the registry learns which agent type resolves a
    /// kind of work: three solvers whose answers a checker escalates at hidden rates 0.7,
    /// 0.4 and 0.1, --tasks (default here 200) sessions with today's ranking, then learned
    /// routing for twice as many, then as many again after the best solver degrades.
    #[arg(long)]
    pub learning: bool,

    /// Instead of one run, measure what a conversation's turn costs through `baton a2a
    /// serve` (router, two LLM workers and the gateway as processes, an instant stand-in
    /// model): blocking SendMessage calls from a plain HTTP client, --tasks (default here
    /// 200) per side: the model alone, a message to one agent, the next turn of a
    /// conversation going straight to its holder, and a first turn across a handoff.
    #[arg(long)]
    pub turns: bool,

    /// Instead of one run, measure one conversation of --tasks turns (default here 1000)
    /// through `baton a2a serve`, twice: with the whole history, then with the agent's
    /// history bounded to 40 messages (`[llm.history]`). Each time: the bytes of each
    /// turn's task and the time of a turn at turns 1, 10, 100 and the last, the bytes
    /// JetStream stores for the conversation against its transcript's size, and its
    /// events by kind.
    #[arg(long)]
    pub long_conversation: bool,

    /// With --long-conversation: its workers run with `--whole-events` (every event
    /// whole, as protocol version 1, for older readers), to compare with the default.
    #[arg(long)]
    pub whole_events: bool,

    /// With --limits: the requests per second the stand-in model allows.
    #[arg(long, default_value_t = 10)]
    pub limit_rps: u32,

    /// The pid of the nats-server the bench started, whose CPU it reports.
    #[arg(skip)]
    pub server_pid: Option<u32>,

    /// The monitoring URL of the nats-server the bench started, whose
    /// `/varz` counts the bytes each hop sends it.
    #[arg(skip)]
    pub monitor_url: Option<String>,

    /// The store directory of the nats-server the bench started, whose
    /// block files `--long-conversation` measures (what the server keeps on
    /// disk, compressed blocks compressed).
    #[arg(skip)]
    pub store_dir: Option<std::path::PathBuf>,
}

/// Nanoseconds since the bench started; every stage reads the same clock.
fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

struct Figures {
    tasks_per_sec: f64,
    hops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    writes_per_hop: f64,
    /// CPU per hop of the bench's process (the stages and the client), µs.
    cpu_worker_us: f64,
    /// CPU per hop of the nats-server the bench started, µs (NaN when it
    /// runs elsewhere).
    cpu_server_us: f64,
    /// Bytes into the server per hop, from its `/varz` (NaN when it runs
    /// elsewhere).
    bytes_per_hop: f64,
}

/// The median of `values` (the mean of the middle two for an even count).
pub(crate) fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The `q` quantile of `values` (the value at the rounded rank; NaN for none).
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[index]
}

fn figures(recorder: &Recorder, tasks: u64, hops: usize, measured: &Measured) -> Figures {
    let elapsed = measured.elapsed;
    let samples = recorder.hops.lock().map(|h| h.clone()).unwrap_or_default();
    let micros: Vec<f64> = samples.iter().map(|ns| *ns as f64 / 1000.0).collect();
    let pick = |q: f64| quantile(&micros, q);
    let secs = elapsed.as_secs_f64();
    Figures {
        tasks_per_sec: tasks as f64 / secs,
        hops_per_sec: (tasks as f64 * hops as f64) / secs,
        p50_us: pick(0.50),
        p99_us: pick(0.99),
        writes_per_hop: 1.0,
        cpu_worker_us: measured.cpu.0,
        cpu_server_us: measured.cpu.1,
        bytes_per_hop: measured.bytes_per_hop,
    }
}

/// A no-op stage of the Baton chain.
struct Stage {
    next: Option<AgentName>,
    recorder: Arc<Recorder>,
    concurrency: usize,
}

impl Agent for Stage {
    async fn handle(&self, task: Task) -> Result<Outcome, AgentError> {
        if let Some(sent) = task
            .envelope
            .context
            .state
            .get("sent_ns")
            .and_then(Value::as_u64)
        {
            self.recorder.hop(sent);
        }
        Ok(match &self.next {
            Some(next) => Outcome::handoff(next.clone(), Reason::OutOfScope)
                .set_state("sent_ns", now_ns())
                .into(),
            None => {
                self.recorder.finish();
                Outcome::complete(Value::Nil).into()
            }
        })
    }

    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::default()
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }
}

/// Runs the benchmark on `client` (connected to the server named `server`)
/// and prints the figures.
///
/// # Errors
///
/// Invalid arguments, or a NATS failure during the run.
pub async fn run(
    client: async_nats::Client,
    server: &str,
    args: BenchArgs,
) -> Result<(), crate::Error> {
    Ok(run_bench(client, server, args).await?)
}

async fn run_bench(
    client: async_nats::Client,
    server: &str,
    args: BenchArgs,
) -> anyhow::Result<()> {
    anyhow::ensure!(args.hops >= 1, "--hops must be at least 1");
    anyhow::ensure!(args.tasks >= 1, "--tasks must be at least 1");
    now_ns();

    if !args.context_bytes.is_empty() && !args.all {
        return context_curve(&client, server, &args, &args.context_bytes).await;
    }
    let processes = scale::ScaleOut {
        client: &client,
        url: server,
        delay: Duration::from_millis(args.delay_ms.max(1)),
        concurrency: args.concurrency,
        seconds: args.round_secs.max(1),
        store_dir: args.store_dir.as_deref(),
        worker_flags: if args.whole_events {
            &["--whole-events"]
        } else {
            &[]
        },
    };
    if args.scale_out {
        return scale::run(&processes).await;
    }
    if args.exec {
        return exec::run(&processes, args.tasks, args.rounds).await;
    }
    if args.tools {
        return tools::run(&processes, args.tasks).await;
    }
    if args.limits {
        let tasks = if args.tasks == 2000 { 300 } else { args.tasks };
        return limits::run(&processes, tasks, args.limit_rps).await;
    }
    if args.learning {
        let tasks = if args.tasks == 2000 { 200 } else { args.tasks };
        return learning::run(&client, usize::try_from(tasks).unwrap_or(usize::MAX)).await;
    }
    if args.ttft {
        let tasks = if args.tasks == 2000 { 100 } else { args.tasks };
        return ttft::run(&processes, tasks).await;
    }
    if args.turns {
        let tasks = if args.tasks == 2000 { 200 } else { args.tasks };
        return turns::run(&processes, tasks).await;
    }
    if args.long_conversation {
        let turns = if args.tasks == 2000 { 1000 } else { args.tasks };
        return long::run(&processes, usize::try_from(turns).unwrap_or(usize::MAX)).await;
    }
    table(&client, server, &args).await?;
    if args.all {
        println!();
        scale::run(&processes).await?;
        println!();
        let sizes = if args.context_bytes.is_empty() {
            DEFAULT_CONTEXT_SIZES.to_vec()
        } else {
            args.context_bytes.clone()
        };
        context_curve(&client, server, &args, &sizes).await?;
    }
    Ok(())
}

/// The context sizes `--all` measures when `--context-bytes` is not given.
const DEFAULT_CONTEXT_SIZES: [usize; 4] = [10_000, 100_000, 1_000_000, 10_000_000];

/// The main table: every side of the chain, then the ratios between them.
async fn table(client: &async_nats::Client, server: &str, args: &BenchArgs) -> anyhow::Result<()> {
    let sample = padded_task(args.payload_bytes);
    let payload_len = sample.to_msgpack()?.len();
    println!(
        "bench: {} tasks (+{} warm-up) through {} hops, concurrency {} per stage, payload {} bytes, {} round(s) of every side, nats-server {}",
        args.tasks, args.warmup, args.hops, args.concurrency, payload_len, args.rounds, server
    );
    // rounds[side]: that side's figures, one per round.
    let mut rounds: Vec<Vec<Figures>> = Side::ALL.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        let round = usize::try_from(round)?;
        for side in Side::ALL {
            if args.only.as_deref().is_none_or(|only| only == side.flag()) {
                rounds[side as usize].push(side.run(client, args, payload_len, round).await?);
            }
        }
    }
    print_sides(&rounds);
    print_ratios(&rounds);
    report::print_cpu(&rounds);
    println!(
        "goals: full / same writes throughput >= 0.85, cpu <= 1.2 and bytes <= 1.2; \
         lean / raw throughput >= 0.7 and cpu <= 1.5"
    );
    Ok(())
}

/// How the Baton chain runs.
struct Mode {
    /// Its own streams: `<PREFIX>_TASKS`, …
    prefix: String,
    settle: SettleMode,
    events: EventLevel,
    accepted_after: Duration,
    /// The version every stage names, if any.
    version: Option<&'static str>,
}

async fn baton_chain(
    client: &async_nats::Client,
    args: &BenchArgs,
    mode: &Mode,
) -> anyhow::Result<Figures> {
    let subjects = Subjects::new(mode.prefix.as_str())?;
    let recorder = Arc::new(Recorder::new(args.concurrency));
    let stop = CancellationToken::new();
    let mut workers = tokio::task::JoinSet::new();
    let names = (0..args.hops)
        .map(|i| AgentName::new(format!("stage{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    for (index, name) in names.iter().enumerate() {
        let stage = Stage {
            next: names.get(index + 1).cloned(),
            recorder: recorder.clone(),
            concurrency: args.concurrency,
        };
        let config = WorkerConfig::new(name.clone())
            .with_subjects(subjects.clone())
            .with_settle(mode.settle)
            .with_events(mode.events)
            .with_accepted_after(mode.accepted_after);
        let config = match mode.version {
            Some(version) => config.with_version(baton_proto::Version::new(version)?),
            None => config,
        };

        workers
            .spawn(Worker::new(client.clone(), config, stage).run(stop.clone().cancelled_owned()));
    }
    let baton = Client::new(client.clone(), subjects.clone());
    // The stages are up once their consumers exist.
    let started = Instant::now();
    for name in &names {
        while baton.check_served(name).await.is_err() {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "stage {name} did not start within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let first = AgentName::new(names[0].as_str())?;
    let payload = args.payload_bytes;
    let max_hops = u32::try_from(args.hops + 1).unwrap_or(u32::MAX);
    let measured = measure(&recorder, args, || {
        let mut task = padded_task(payload).with_max_hops(max_hops);
        task.context
            .state
            .insert("sent_ns".into(), Value::from(now_ns()));
        let (baton, first) = (baton.clone(), first.clone());
        async move { Ok(baton.submit_to(&first, &task).await?) }
    })
    .await?;
    stop.cancel();
    // A stopping worker waits for its pull requests to expire (5 s) to hand
    // back what they still deliver; the next side need not wait for that.
    tokio::spawn(async move {
        while let Some(result) = workers.join_next().await {
            match result {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "a bench stage stopped with an error"),
                Err(err) => tracing::warn!(error = %err, "a bench stage panicked"),
            }
        }
    });
    let mut figures = figures(&recorder, args.tasks, args.hops, &measured);
    let js = async_nats::jetstream::new(client.clone());
    let events = stored_when_quiet(&js, &subjects.events_stream()).await?;
    figures.writes_per_hop = writes_per_hop(args, events);
    Ok(figures)
}

mod context;
mod cpu;
mod exec;
mod learning;
mod limits;
mod long;
mod raw;
mod recorder;
mod report;
mod scale;
mod side;
mod tools;
mod ttft;
mod turns;
use raw::raw_relay;
use recorder::Recorder;
use side::{Side, stored_when_quiet, writes_per_hop};

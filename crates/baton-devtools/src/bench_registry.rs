//! `baton bench-registry`: lookups per second and lookup latency against a
//! registry that holds many agent types, each with many instances.
//!
//! It runs a registry replica in this process, registers the instances with
//! ordinary heartbeats, then sends lookups over NATS request/reply: first one
//! at a time (latency), then many at once (throughput). It reports; it
//! asserts nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use baton_proto::{Heartbeat, LookupRequest, LookupResponse, Map, Subjects, Wire, now_ms};
use baton_registry::{Registry, RegistryConfig};
use bytes::Bytes;
use clap::Args;
use tokio_util::sync::CancellationToken;

/// What `baton bench-registry` measures.
#[derive(Debug, Args)]
pub struct BenchRegistryArgs {
    /// Agent types to register.
    #[arg(long, default_value_t = 100)]
    pub types: usize,

    /// Instances of each agent type.
    #[arg(long, default_value_t = 10)]
    pub instances: usize,

    /// Lookups in each phase.
    #[arg(long, default_value_t = 20_000)]
    pub lookups: usize,

    /// Lookups in flight at once in the throughput phase.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
}

/// Capabilities spread over the agent types: each lookup matches a handful.
const CAPABILITY_GROUPS: usize = 20;

fn heartbeat(kind: usize, instance: usize) -> Heartbeat {
    Heartbeat {
        agent: baton_proto::AgentName::new(format!("type-{kind:03}")).expect("a valid name"),
        instance: format!("i{instance:03}"),
        capabilities: vec![
            format!("cap-{}", kind % CAPABILITY_GROUPS),
            "shared".to_owned(),
        ],
        domains: vec![format!("domain-{}", kind % 5)],
        tier: 1 + u32::try_from(kind % 3).unwrap_or(0),
        in_flight: u32::try_from((kind + instance) % 8).unwrap_or(0),
        max_concurrency: 8,
        processed: 1000,
        failed: u64::try_from(kind % 7).unwrap_or(0),
        at: now_ms(),
        // Long enough that nothing expires during the run.
        interval_ms: Some(600_000),
        description: None,
        tool_schema: None,
        version: None,
        extra: Map::new(),
    }
}

/// The n-th lookup: a capability group, sometimes a domain, a tier or an exclusion.
fn request(n: usize) -> Bytes {
    let request = LookupRequest {
        requires: vec![format!("cap-{}", n % CAPABILITY_GROUPS)],
        domains: if n % 4 == 0 {
            vec![format!("domain-{}", n % 5)]
        } else {
            vec![]
        },
        min_tier: (n % 3 == 0).then_some(2),
        exclude: vec![
            baton_proto::AgentName::new(format!("type-{:03}", n % 100)).expect("a valid name"),
        ],
        ..LookupRequest::default()
    };
    Bytes::from(request.to_msgpack().unwrap_or_default())
}

struct Figures {
    per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
}

fn figures(mut latencies: Vec<Duration>, elapsed: Duration) -> Figures {
    latencies.sort_unstable();
    let pick = |q: f64| {
        let index = ((latencies.len().saturating_sub(1)) as f64 * q).round() as usize;
        latencies
            .get(index)
            .map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    };
    Figures {
        per_sec: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: pick(0.50),
        p99_us: pick(0.99),
        max_us: pick(1.0),
    }
}

async fn lookup(
    client: &async_nats::Client,
    subject: &str,
    payload: Bytes,
) -> anyhow::Result<usize> {
    let reply = client
        .request(subject.to_owned(), payload)
        .await
        .context("lookup failed")?;
    Ok(LookupResponse::from_msgpack(&reply.payload)?
        .candidates
        .len())
}

/// Runs the registry benchmark on `client` and prints the figures.
///
/// # Errors
///
/// Invalid arguments, or a NATS failure during the run.
pub async fn run(client: async_nats::Client, args: BenchRegistryArgs) -> Result<(), crate::Error> {
    Ok(run_lookups(client, args).await?)
}

async fn run_lookups(client: async_nats::Client, args: BenchRegistryArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.types >= 1 && args.instances >= 1,
        "--types and --instances must be at least 1"
    );
    anyhow::ensure!(
        args.lookups >= 1 && args.concurrency >= 1,
        "--lookups and --concurrency must be at least 1"
    );
    // A prefix of its own, so a bench against a shared server touches nothing else.
    let subjects = Subjects::new("baton-bench")?;

    let stop = CancellationToken::new();
    let config = RegistryConfig::default()
        .with_subjects(subjects.clone())
        .with_warmup(Duration::from_millis(500));
    let registry =
        tokio::spawn(Registry::new(client.clone(), config).run(stop.clone().cancelled_owned()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    register(&client, &subjects, &args).await?;
    println!(
        "registry bench: {} agent types x {} instances registered; {} lookups per phase",
        args.types, args.instances, args.lookups
    );

    let subject = subjects.lookup();
    // Warm-up, not measured.
    for n in 0..500 {
        lookup(&client, &subject, request(n)).await?;
    }

    let mut latencies = Vec::with_capacity(args.lookups);
    let mut matched = 0;
    let started = Instant::now();
    for n in 0..args.lookups {
        let sent = Instant::now();
        matched += lookup(&client, &subject, request(n)).await?;
        latencies.push(sent.elapsed());
    }
    let sequential = figures(latencies, started.elapsed());
    let concurrent = concurrent_lookups(Arc::new(client), subject, &args).await?;

    println!(
        "average candidates per answer: {:.1}",
        matched as f64 / args.lookups as f64
    );
    println!();
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>10}",
        "", "lookups/s", "p50 µs", "p99 µs", "max µs"
    );
    for (name, f) in [
        ("one at a time".to_owned(), &sequential),
        (format!("{} in flight", args.concurrency), &concurrent),
    ] {
        println!(
            "{name:<22} {:>10.0} {:>10.0} {:>10.0} {:>10.0}",
            f.per_sec, f.p50_us, f.p99_us, f.max_us
        );
    }
    println!("target: p99 < 1000 µs on loopback (one at a time)");
    stop.cancel();
    registry.await.context("registry task failed")??;
    Ok(())
}

/// Sends one heartbeat per synthetic instance, then waits until the registry
/// lists every agent type.
async fn register(
    client: &async_nats::Client,
    subjects: &Subjects,
    args: &BenchRegistryArgs,
) -> anyhow::Result<()> {
    for kind in 0..args.types {
        for instance in 0..args.instances {
            let beat = heartbeat(kind, instance);
            let subject = format!(
                "{}.registry.heartbeat.{}.{}",
                subjects.prefix(),
                beat.agent,
                beat.instance
            );
            client.publish(subject, beat.to_msgpack()?.into()).await?;
        }
    }
    client.flush().await?;
    let subject = subjects.lookup();
    let everything = Bytes::from(LookupRequest::default().to_msgpack()?);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(found) = lookup(client, &subject, everything.clone()).await {
            if found == args.types {
                return Ok(());
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the registry did not list all {} agent types within 10 s",
            args.types
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `args.lookups` lookups spread over `args.concurrency` tasks.
async fn concurrent_lookups(
    client: Arc<async_nats::Client>,
    subject: String,
    args: &BenchRegistryArgs,
) -> anyhow::Result<Figures> {
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    let concurrency = args.concurrency;
    for worker in 0..concurrency {
        let client = client.clone();
        let subject = subject.clone();
        let share = args.lookups / concurrency + usize::from(worker < args.lookups % concurrency);
        workers.spawn(async move {
            let mut latencies = Vec::with_capacity(share);
            for n in 0..share {
                let sent = Instant::now();
                lookup(&client, &subject, request(n * concurrency + worker)).await?;
                latencies.push(sent.elapsed());
            }
            anyhow::Ok(latencies)
        });
    }
    let mut latencies = Vec::with_capacity(args.lookups);
    while let Some(result) = workers.join_next().await {
        latencies.extend(result??);
    }
    Ok(figures(latencies, started.elapsed()))
}

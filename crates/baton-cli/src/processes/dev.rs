//! `baton dev`: the whole system on one machine, with the demo tasks.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_client::Client;
use baton_devtools::demo::{self, Demo};
use baton_proto::{AgentName, Envelope, EventType, Subjects};
use baton_router::{Router, RouterConfig};
use baton_worker::{RetryPolicy, Worker, WorkerConfig};
use clap::Args;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::worker::Configured;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Keep the agents running after the demo tasks, until Ctrl-C (try `baton send` meanwhile).
    #[arg(long)]
    pub serve: bool,

    /// How long to wait for each demo session to end, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

pub async fn run(nats: &NatsArgs, subjects: Subjects, args: DevArgs) -> anyhow::Result<ExitCode> {
    let (client, server) =
        crate::nats::connect_or_start(nats, &baton_ops::Role::of(baton_ops::RoleKind::Client))
            .await?;
    if let Some(server) = &server {
        println!(
            "nats-server started at {} (store {})",
            server.url(),
            server.store_dir().display()
        );
    }

    let stop = CancellationToken::new();
    let mut services = start_services(client.client(), &subjects, &stop)?;
    println!(
        "router (entry agent {}) and {} demo agents running: {}",
        demo::ENTRY,
        demo::AGENTS.len(),
        demo::AGENTS
            .iter()
            .map(|a| format!("{a} (tier {})", Demo::by_name(a).map_or(0, Demo::tier)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    wait_for_registry(client.client(), &subjects).await?;
    println!(
        "registry (service {}) knows every demo agent",
        baton_registry::SERVICE_NAME
    );

    let baton = Client::new(client.clone(), subjects.clone());
    let all_completed = run_demo_tasks(&baton, Duration::from_secs(args.timeout_secs)).await?;
    let dead = baton.dead_letters().await?;
    println!();
    println!("{} dead letter(s) in {}", dead.len(), subjects.dlq_stream());

    if args.serve {
        println!();
        let url = server.as_ref().map_or_else(
            || crate::nats::shown(nats.nats_url.as_deref()),
            |server| server.url().to_owned(),
        );
        println!(
            "serving until Ctrl-C; in another shell: baton --nats-url {url} send --wait \"Where is my order ABC-123?\""
        );
        println!(
            "the web console: baton --nats-url {url} console, then open http://127.0.0.1:8080/"
        );
        crate::shutdown_signal().await;
    }
    stop.cancel();
    while let Some(result) = services.join_next().await {
        result.context("a service task panicked")??;
    }
    drop(server);
    Ok(if all_completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Starts the registry, the router and one worker pool per demo agent, all
/// stopping when `stop` is cancelled.
fn start_services(
    client: &async_nats::Client,
    subjects: &Subjects,
    stop: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinSet<anyhow::Result<()>>> {
    let mut services = tokio::task::JoinSet::new();
    // A replica warms up for one heartbeat interval; here every worker starts
    // right after it and sends its first heartbeat at once.
    let registry = baton_registry::RegistryConfig::default()
        .with_subjects(subjects.clone())
        .with_warmup(Duration::from_millis(500));
    let registry = baton_registry::Registry::new(client.clone(), registry);
    let registry_stop = stop.clone();
    services.spawn(async move {
        registry.run(registry_stop.cancelled_owned()).await?;
        anyhow::Ok(())
    });
    let router = RouterConfig::default()
        .with_subjects(subjects.clone())
        .with_default_agent(Some(AgentName::new(demo::ENTRY)?));
    let router = Router::new(client.clone(), router).run(stop.clone().cancelled_owned());
    services.spawn(async move { Ok(router.await?) });
    let fallback = AgentName::new(demo::FALLBACK)?;
    for name in demo::AGENTS {
        let agent = AgentName::new(name)?;
        let kind = Demo::by_name(name).context("demo agent")?;
        let config = WorkerConfig::new(agent.clone())
            .with_subjects(subjects.clone())
            .with_profile(kind.profile())
            .with_fallback((name != demo::FALLBACK).then(|| fallback.clone()))
            .with_shutdown_grace(Duration::from_secs(5));
        let configured = Configured {
            inner: kind,
            retry: RetryPolicy {
                min_backoff: Duration::from_millis(100),
                ..RetryPolicy::default()
            },
            timeout: Duration::from_secs(30),
            concurrency: 8,
        };
        let worker =
            Worker::new(client.clone(), config, configured).run(stop.clone().cancelled_owned());
        services.spawn(async move { Ok(worker.await?) });
    }
    Ok(services)
}

/// Submits every demo task, then prints each session's events until its
/// terminal one. Returns whether every session completed.
async fn run_demo_tasks(baton: &Client, timeout: Duration) -> anyhow::Result<bool> {
    // Submit everything first: the sessions run concurrently across the pools.
    let mut sessions = Vec::new();
    for (case, text) in demo::TASKS {
        let task = Envelope::task(text);
        baton.submit(&task).await?;
        sessions.push((case, text, task.session));
    }
    let mut all_completed = true;
    for (number, (case, text, session)) in sessions.into_iter().enumerate() {
        println!();
        println!("[{}] {case}", number + 1);
        println!("  user:   {text}");
        println!("  session {session}");
        // Followed to its end: the stream stops there.
        let mut events = baton.follow(session).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut end = None;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, events.next()).await {
            let event = event?;
            println!("    {}", baton_gateway::text::line(&event));
            end = Some(event).filter(|event| event.kind.is_terminal());
        }
        if let Some(end) = end {
            crate::shown::print_outcome(&end);
            all_completed &= end.kind == EventType::Completed;
        } else {
            println!("  no terminal event within {}s", timeout.as_secs());
            all_completed = false;
        }
    }
    Ok(all_completed)
}

/// Waits until the registry lists every demo agent type.
async fn wait_for_registry(client: &async_nats::Client, subjects: &Subjects) -> anyhow::Result<()> {
    let registry = baton_client::RegistryClient::new(client.clone(), subjects);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(answer) = registry
            .lookup(&baton_proto::LookupRequest::default())
            .await
        {
            if answer.candidates.len() >= demo::AGENTS.len() {
                return Ok(());
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the registry did not see all {} demo agents within 15 s",
            demo::AGENTS.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

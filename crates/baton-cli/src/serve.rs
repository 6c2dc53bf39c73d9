//! `baton worker` and `baton router`: long-running processes.

use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Subjects};
use baton_worker::{RetryPolicy, Router, RouterConfig, Worker, WorkerConfig};

use crate::args::{NatsArgs, RegistryArgs, RouterArgs, WorkerArgs};
use baton_devtools::demo::{self, Demo};
use baton_devtools::relay::{Delegation, Relay};

pub async fn worker(
    nats: &NatsArgs,
    subjects: Subjects,
    args: WorkerArgs,
) -> anyhow::Result<std::process::ExitCode> {
    if let Some(path) = &args.spec {
        return spec_worker(nats, subjects, path, &args).await;
    }
    let Some(agent) = &args.agent else {
        anyhow::bail!(
            "name an agent type (`baton worker refund`) or a spec (`baton worker --spec FILE`)"
        );
    };
    let agent = AgentName::new(agent.as_str())?;
    let demo = Demo::by_name(agent.as_str());
    if demo.is_none() && !args.relay {
        anyhow::bail!(
            "unknown agent type \"{agent}\": the built-in demo types are {}; to serve another name, add --relay, \
             or describe the agent in a spec file and use --spec (see `baton worker --help`)",
            demo::AGENTS.join(", ")
        );
    }
    let default_fallback =
        (demo.is_some() && agent.as_str() != demo::FALLBACK).then_some(demo::FALLBACK.to_owned());
    let fallback = if args.no_fallback {
        None
    } else {
        args.fallback.clone().or(default_fallback)
    };
    let fallback = fallback
        .map(AgentName::new)
        .transpose()
        .context("invalid --fallback")?;
    let profile = profile(demo, &args.registry);
    // A spec sets these itself; for the other workers the flags do.
    let config = deployment(
        WorkerConfig::new(agent.clone())
            .with_subjects(subjects)
            .with_fallback(fallback)
            .with_profile(profile)
            .with_max_delegation_depth(args.max_delegation_depth)
            .with_join_timeout(args.join_timeout_ms.map(Duration::from_millis)),
        &args,
        nats,
    )?;
    let retry = RetryPolicy {
        max_attempts: args.max_attempts.max(1),
        min_backoff: Duration::from_millis(args.min_backoff_ms),
        max_backoff: Duration::from_millis(args.max_backoff_ms.max(args.min_backoff_ms)),
    };
    let client = crate::nats::connect(nats, None, &baton_ops::Role::worker(&agent)).await?;
    baton_telemetry::serve::watch(client.client(), true);
    match demo {
        Some(demo) if !args.relay => {
            let demo = Configured {
                inner: demo,
                retry,
                timeout: Duration::from_millis(args.timeout_ms),
                concurrency: args.concurrency.unwrap_or(8),
            };
            Worker::new(client, config, demo)
                .run(crate::shutdown_signal())
                .await?;
        }
        _ => {
            let relay = relay(agent.to_string(), args, retry);
            Worker::new(client, config, relay)
                .run(crate::shutdown_signal())
                .await?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The registry profile: a demo type's own, with the command line's
/// capabilities, domains and tier over it.
fn profile(
    demo: Option<Demo>,
    registry: &crate::args::WorkerRegistryArgs,
) -> baton_worker::Profile {
    let mut profile = demo.map(Demo::profile).unwrap_or_default();
    if let Some(capabilities) = &registry.capabilities {
        profile.capabilities.clone_from(capabilities);
    }
    if let Some(domains) = &registry.domains {
        profile.domains.clone_from(domains);
    }
    if let Some(tier) = registry.tier {
        profile.tier = tier;
    }
    profile
}

/// A relay agent as the command line describes it.
fn relay(name: String, args: WorkerArgs, retry: RetryPolicy) -> Relay {
    let relay_args = args.relay_options;
    Relay {
        name,
        next: relay_args.next,
        next_requires: relay_args.next_requires,
        delegate: relay_args.delegate.map(|agents| Delegation {
            agents,
            mode: relay_args.delegate_mode,
            recover: relay_args.recover,
            recover_value: relay_args.recover_value,
        }),
        fail_attempts: relay_args.fail_attempts,
        fatal: relay_args.fatal,
        reject: relay_args.reject,
        escalate: relay_args.escalate,
        work: Duration::from_millis(relay_args.work_ms),
        retry,
        timeout: Duration::from_millis(args.timeout_ms),
        concurrency: args.concurrency.unwrap_or(8),
        quiet: relay_args.quiet,
    }
}

/// The deployment options of the command line applied to `config`: how the
/// process runs, never what a spec decides.
fn deployment(
    config: WorkerConfig,
    args: &WorkerArgs,
    nats: &NatsArgs,
) -> anyhow::Result<WorkerConfig> {
    let registry = &args.registry;
    let mut claims = args.claims.settings();
    claims.replicas = nats.replicas();
    let mut config = config
        .with_streams(nats.streams())
        .with_ack_wait(Duration::from_secs(args.ack_wait_secs.max(1)))
        .with_max_payload(args.max_payload)
        .with_shutdown_grace(Duration::from_secs(args.shutdown_grace_secs))
        .with_max_deliveries(args.max_deliveries)
        .with_heartbeat_interval(Duration::from_millis(registry.heartbeat_ms.max(10)))
        .with_registry(!registry.no_registry)
        .with_lookup_budget(Duration::from_millis(registry.lookup_budget_ms))
        .with_registry_memory(Duration::from_secs(registry.registry_memory_secs))
        .with_claims(claims)
        .with_settle(args.settle.into())
        .with_events(args.events.into())
        .with_live(args.live.into())
        .with_accepted_after(Duration::from_millis(args.accepted_after_ms));
    if let Some(instance) = &args.instance {
        anyhow::ensure!(
            !instance.is_empty()
                && instance
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "invalid --instance {instance:?}: use letters, digits, '-' and '_'"
        );
        config = config.with_instance(instance.clone());
    }
    Ok(config)
}

/// `baton worker --spec FILE`: the agent type a spec file describes.
async fn spec_worker(
    nats: &NatsArgs,
    subjects: Subjects,
    path: &std::path::Path,
    args: &WorkerArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let spec = baton_agents::load(path).map_err(|errors| {
        anyhow::anyhow!(
            "the spec has problems (`baton check {}` lists them):\n{errors}",
            path.display()
        )
    })?;
    let name = spec.name.clone();
    let client = crate::nats::connect(nats, None, &baton_ops::Role::worker(&name)).await?;
    baton_telemetry::serve::watch(client.client(), true);
    let team = spec.team.clone();
    let agent = baton_agents::SpecAgent::new(spec, client.client(), &subjects, nats.replicas())
        .await
        .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?;
    let config = deployment(agent.worker_config(subjects), args, nats)?;
    match team {
        Some(team) => {
            let agent = baton_worker::Team::new(agent, team);
            Worker::new(client, config, agent)
                .run(crate::shutdown_signal())
                .await?;
        }
        None => {
            Worker::new(client, config, agent)
                .run(crate::shutdown_signal())
                .await?;
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A demo agent with policies from the command line.
pub struct Configured {
    pub inner: Demo,
    pub retry: RetryPolicy,
    pub timeout: Duration,
    pub concurrency: usize,
}

impl baton_worker::Agent for Configured {
    fn handle(
        &self,
        task: baton_worker::Task,
    ) -> impl std::future::Future<Output = Result<baton_worker::Outcome, baton_worker::AgentError>> + Send
    {
        baton_worker::Agent::handle(&self.inner, task)
    }

    fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn concurrency(&self) -> usize {
        self.concurrency
    }
}

pub async fn router(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RouterArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let default_agent = args
        .default_agent
        .map(AgentName::new)
        .transpose()
        .context("invalid --default-agent")?;
    let fallback = args
        .fallback
        .map(AgentName::new)
        .transpose()
        .context("invalid --fallback")?;
    let mut config = RouterConfig::default()
        .with_subjects(subjects)
        .with_default_agent(default_agent)
        .with_fallback(fallback)
        .with_registry(!args.no_registry)
        .with_max_payload(args.max_payload)
        .with_default_deadline(args.default_deadline_ms.map(Duration::from_millis))
        .with_default_budget(baton_proto::Budget {
            tokens: args.default_budget_tokens,
            cost_micros: args.default_budget_cost,
        });
    config.streams = nats.streams();
    config.conversation_ttl = Duration::from_secs(args.conversation_ttl_secs);
    let client = crate::nats::connect(
        nats,
        None,
        &baton_ops::Role::of(baton_ops::RoleKind::Router),
    )
    .await?;
    baton_telemetry::serve::watch(client.client(), true);
    Router::new(client, config)
        .run(crate::shutdown_signal())
        .await?;
    Ok(std::process::ExitCode::SUCCESS)
}

pub async fn registry(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RegistryArgs,
) -> anyhow::Result<std::process::ExitCode> {
    anyhow::ensure!(
        args.heartbeat_ms >= 10,
        "--heartbeat-ms {} is too short: use at least 10 (the default is 2000)",
        args.heartbeat_ms
    );
    let learning = baton_registry::LearningConfig {
        enabled: !args.no_learning,
        window: args.learning_window as usize,
        ..baton_registry::LearningConfig::default()
    };
    let config = baton_registry::RegistryConfig::default()
        .with_subjects(subjects)
        .with_heartbeat_interval(Duration::from_millis(args.heartbeat_ms))
        .with_learning(learning);
    let client = crate::nats::connect(
        nats,
        None,
        &baton_ops::Role::of(baton_ops::RoleKind::Registry),
    )
    .await?;
    baton_telemetry::serve::watch(client.client(), false);
    baton_registry::Registry::new(client.client().clone(), config)
        .run(crate::shutdown_signal())
        .await?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// `baton console`: the web console, as the operator role.
pub async fn console(
    nats: &NatsArgs,
    subjects: Subjects,
    args: crate::args::ConsoleArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let mut config = baton_console::ConsoleConfig::new(args.listen);
    config.token = args.access_token;
    config.trace_url = args.trace_url;
    config.sessions = args.sessions.max(1);
    config.shown = args.rows.max(1);
    config.replicas = nats.replicas();
    // Refuse an open listener before connecting anywhere.
    baton_console::Access::new(config.listen, config.token.as_deref())?;
    let client = crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Operator).await?;
    baton_console::serve(config, client, subjects, crate::shutdown_signal()).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The agent types of `--agents`.
fn agent_names(names: &[String]) -> anyhow::Result<Vec<AgentName>> {
    names
        .iter()
        .map(|name| {
            AgentName::new(name.as_str())
                .with_context(|| format!("invalid --agents entry {name:?}"))
        })
        .collect()
}

/// `baton mcp serve`: agent types as MCP tools, as the client role.
pub async fn mcp(
    nats: &NatsArgs,
    subjects: Subjects,
    args: crate::args::McpServeArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let only = agent_names(&args.agents)?;
    let client = crate::nats::client(nats, subjects.clone(), baton_ops::RoleKind::Client).await?;
    let registry = baton_worker::RegistryClient::new(client.jetstream().client(), &subjects);
    let gateway = baton_mcp::Gateway::new(
        client,
        registry,
        only,
        Duration::from_secs(args.timeout_secs.max(1)),
    )
    .with_budget(baton_proto::Budget {
        tokens: args.budget_tokens,
        cost_micros: args.budget_cost,
    })
    .with_replicas(nats.replicas());
    match args.http {
        Some(listen) => {
            let callers = args.callers.as_deref();
            let shutdown = crate::shutdown_signal();
            baton_mcp::serve_http(gateway, listen, args.access_token, callers, shutdown).await?;
        }
        None => gateway.serve_stdio().await?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// `baton a2a serve`: the ingress and agent types as A2A agents, as the
/// operator role (it starts sessions, answers the inbox and cancels).
pub async fn a2a(
    nats: &NatsArgs,
    subjects: Subjects,
    args: crate::args::A2aServeArgs,
) -> anyhow::Result<std::process::ExitCode> {
    let only = agent_names(&args.agents)?;
    if let Some(path) = &args.callers {
        // A bad file is told before anything else is tried.
        baton_gateway::callers::Callers::load(path).map_err(anyhow::Error::msg)?;
    }
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Operator).await?;
    let settings = baton_a2a::Settings {
        only,
        timeout: Duration::from_secs(args.timeout_secs.max(1)),
        public_url: args.public_url,
        listen: args.listen,
        token: args.access_token,
        callers: args.callers,
        replicas: nats.streams().replicas,
        budget: baton_proto::Budget {
            tokens: args.budget_tokens,
            cost_micros: args.budget_cost,
        },
        overlap: args.overlap,
    };
    baton_a2a::serve(client, settings, crate::shutdown_signal()).await?;
    Ok(std::process::ExitCode::SUCCESS)
}

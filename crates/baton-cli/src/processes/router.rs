//! `baton router`: moves tasks from the ingress to their first agent.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use baton_proto::{AgentName, Subjects};
use baton_router::{Router, RouterConfig};
use clap::Args;

use super::metrics::MetricsArgs;
use super::stop::Stop;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct RouterArgs {
    #[command(flatten)]
    pub metrics: MetricsArgs,

    /// Agent type for tasks that name neither `to` nor `requires`; without it such tasks fail
    /// with `no_route`.
    #[arg(long)]
    pub default_agent: Option<String>,

    /// Agent type for tasks whose `requires` no live agent meets (reason `no_match`);
    /// without it such tasks fail with `no_route`.
    #[arg(long)]
    pub fallback: Option<String>,

    /// Do not route tasks with `requires` through the registry.
    #[arg(long)]
    pub no_registry: bool,

    /// Largest task accepted, in bytes.
    #[arg(long, default_value_t = baton_proto::DEFAULT_MAX_PAYLOAD)]
    pub max_payload: usize,

    /// Give tasks that arrive without a deadline this many ms, so no session can run
    /// (or wait) forever; they end with `deadline_exceeded`.
    #[arg(long, env = "BATON_DEFAULT_DEADLINE_MS", value_name = "MS")]
    pub default_deadline_ms: Option<u64>,

    /// Give tasks that arrive without a token budget this one (see `baton send
    /// --budget-tokens`).
    #[arg(
        long,
        env = "BATON_DEFAULT_BUDGET_TOKENS",
        value_name = "TOKENS",
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub default_budget_tokens: Option<u64>,

    /// Give tasks that arrive without a cost budget this one, as a decimal amount (see
    /// `baton send --budget-cost`).
    #[arg(
        long,
        env = "BATON_DEFAULT_BUDGET_COST",
        value_name = "AMOUNT",
        allow_negative_numbers = true,
        value_parser = crate::sessions::amount
    )]
    pub default_budget_cost: Option<u64>,

    /// Remove a conversation nothing has happened in for this many seconds (30 days by
    /// default): its record, its listed turns, its turns' events and its transcript. The
    /// id may then start a new conversation. A deleted conversation's marker goes the
    /// same time after the delete.
    #[arg(
        long,
        env = "BATON_CONVERSATION_TTL_SECS",
        value_name = "SECS",
        default_value_t = 30 * 24 * 3600,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub conversation_ttl_secs: u64,

    /// How long the tasks being routed may take to finish on SIGTERM or Ctrl-C, in seconds.
    /// The router then exits; a task still unsettled stays un-acked, and the server
    /// redelivers it to another router after its ack wait. With the NATS server unreachable
    /// nothing can be acked, so it exits at once. A second SIGTERM or Ctrl-C exits at once
    /// too.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub shutdown_grace_secs: u64,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RouterArgs,
) -> anyhow::Result<ExitCode> {
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
        .with_shutdown_grace(Duration::from_secs(args.shutdown_grace_secs))
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
    let grace = config.shutdown_grace;
    let left = std::sync::Arc::new(|| {
        "the tasks being routed stay un-acked; the server redelivers them after their ack wait"
            .to_owned()
    });
    let stop = Stop::listen(grace, Some(client.client().clone()), left);
    Router::new(client, config).run(stop.signal()).await?;
    Ok(ExitCode::SUCCESS)
}

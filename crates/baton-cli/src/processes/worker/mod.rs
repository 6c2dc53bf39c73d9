//! `baton worker`: one worker of an agent type, a demo type, a relay or a spec.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use baton_devtools::demo::{self, Demo};
use baton_proto::{AgentName, Subjects};
use baton_worker::{RetryPolicy, Worker, WorkerConfig};
use clap::Args;

use super::metrics::MetricsArgs;
use super::stop::{Left, Stop};
use crate::nats::NatsArgs;
pub use claims::ClaimArgs;
pub use options::{Events, Live, Settle, WorkerRegistryArgs};
pub use relay::RelayArgs;

mod claims;
mod options;
mod relay;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Agent type to serve: a demo type (general_enquiry, order_management, advanced_order,
    /// refund, human_support) or, with --relay, any name. Not needed with --spec.
    #[arg(required_unless_present = "spec")]
    pub agent: Option<String>,

    /// Serve the agent type a spec file describes (exec, llm or human); its name, policies,
    /// fallback and routing come from the file. Check it first with `baton check FILE`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["agent", "relay"])]
    pub spec: Option<PathBuf>,

    /// Serve AGENT with the configurable relay agent instead of a demo agent (see the relay options).
    #[arg(long)]
    pub relay: bool,

    /// Where escalations, loops and exhausted tasks go (default for demo agents: human_support).
    #[arg(long, conflicts_with = "spec")]
    pub fallback: Option<String>,

    /// Serve without a fallback agent: such tasks fail instead.
    #[arg(long, conflicts_with_all = ["fallback", "spec"])]
    pub no_fallback: bool,

    /// Tasks handled at once by this process.
    #[arg(long, conflicts_with = "spec")]
    pub concurrency: Option<usize>,

    /// Deliveries of a task in all before it is dead-lettered with `max_attempts`.
    #[arg(long, default_value_t = 3, conflicts_with = "spec")]
    pub max_attempts: u32,

    /// Delay before the second attempt, in ms (doubles per attempt).
    #[arg(long, default_value_t = 200, conflicts_with = "spec")]
    pub min_backoff_ms: u64,

    /// Upper bound of the retry delay, in ms.
    #[arg(long, default_value_t = 30_000, conflicts_with = "spec")]
    pub max_backoff_ms: u64,

    /// How long one attempt may run, in ms.
    #[arg(long, default_value_t = 60_000, conflicts_with = "spec")]
    pub timeout_ms: u64,

    /// Redelivery timeout of the agent type's consumer, in seconds (applies when the consumer is created).
    #[arg(long, default_value_t = 30)]
    pub ack_wait_secs: u64,

    /// Largest envelope accepted, in bytes; bigger ones are dead-lettered as `too_large`.
    #[arg(long, default_value_t = baton_proto::DEFAULT_MAX_PAYLOAD)]
    pub max_payload: usize,

    /// How long in-flight work may take to finish on SIGTERM or Ctrl-C, in seconds. The
    /// worker then exits; what is still unfinished stays un-acked, and the server
    /// redelivers it after --ack-wait-secs (the log says how many). With the NATS server
    /// unreachable nothing can be acked, so it exits at once. A second SIGTERM or Ctrl-C
    /// exits at once too.
    #[arg(long, default_value_t = 20, value_name = "SECS")]
    pub shutdown_grace_secs: u64,

    /// A message delivered this many times without being settled (a worker crashed on it
    /// each time) is dead-lettered with `max_deliveries` on its next delivery, unread.
    /// Must be above the agent's max attempts. The consumer's max_deliver is one more; a
    /// message whose last delivery is not settled either is dead-lettered from the
    /// server's max-deliveries advisory.
    #[arg(long, env = "BATON_MAX_DELIVERIES", default_value_t = 20)]
    pub max_deliveries: u32,

    /// How a handled message is acknowledged once its outputs are durable: `plain` sends the
    /// ack and goes on, and an ack lost on the way costs one more run of the agent after
    /// --ack-wait-secs, never a doubled handoff; `confirmed` also waits for the server to
    /// confirm it (a second round trip).
    #[arg(long, env = "BATON_SETTLE", value_enum, default_value_t = Settle::Plain)]
    pub settle: Settle,

    /// Which session events are stored: `full` (every event) or `lean` (only what replay
    /// needs; `accepted` and `handoff` go out live on `<prefix>.live.<session>`, unstored,
    /// and each hop's timing stays in the path). `baton watch` shows both.
    #[arg(long, env = "BATON_EVENTS", value_enum, default_value_t = Events::Full)]
    pub events: Events,

    /// To whom the events `--events lean` does not store go live: `followed` publishes them
    /// only while someone follows the session or every session (the console, `baton live`,
    /// `baton send`, the gateways and the router's relay say so in the BATON_FOLLOWERS
    /// bucket); `always` publishes them regardless, for your own subscribers of
    /// `<prefix>.live.*` that do not.
    #[arg(long, env = "BATON_LIVE", value_enum, default_value_t = Live::Followed)]
    pub live: Live,

    /// How long an agent runs, in ms, before its hop's `accepted` event is sent on its
    /// own (stored with `--events full`, live with `lean`). A hop that ends sooner folds it
    /// into its next event (`handoff`, `completed`, …), one message instead of two;
    /// `baton watch` and the clients restore it. 0 sends every `accepted` event at once.
    #[arg(long, env = "BATON_ACCEPTED_AFTER_MS", default_value_t = 100)]
    pub accepted_after_ms: u64,

    /// Write every event whole, as protocol version 1. By default an event keeps once what
    /// it holds twice: a terminal event's answer (`output`) and a context's
    /// `initial_query` refer to the context's message with the same text (`refs`), and a
    /// handoff event names only the hop it adds (`path_from`), and a replayable session's
    /// `started` event rides in its hop's end (`started`); such an event is version 2.
    /// Readers of this release put the parts back; a reader of an earlier release refuses
    /// a version-2 event as `unsupported_version`. Set this while processes or clients
    /// of an earlier release still read this deployment's events (workers, router,
    /// gateways, console, CLI, your own clients), as during a rolling upgrade from one,
    /// and unset it once they are all upgraded.
    #[arg(long, env = "BATON_WHOLE_EVENTS", conflicts_with = "compact_events")]
    pub whole_events: bool,

    /// Events keep once what they hold twice: the default now. Accepted so that command
    /// lines of the release that made it an opt-in still start.
    #[arg(long, hide = true, env = "BATON_COMPACT_EVENTS")]
    pub compact_events: bool,

    /// Instance id reported in events (default: random).
    #[arg(long)]
    pub instance: Option<String>,

    /// The version of the agent type this worker runs: an operator's label, such as "2", a git
    /// sha or a date (letters, digits, '_' and '-'). It is shown in heartbeats and `baton agents`
    /// and written in the worker's events. A spec names its own (`version = "..."`, else a hash
    /// of the file).
    #[arg(long, value_name = "VERSION", conflicts_with = "spec")]
    pub version: Option<String>,

    /// With --version: once another version is current, the conversations pinned to this one
    /// move to it at their next turn (a spec says `upgrade = "next_turn"`). Without it they stay
    /// until they end or the version is retired with --upgrade-conversations.
    #[arg(long, requires = "version", conflicts_with = "spec")]
    pub upgrade_next_turn: bool,

    /// How deep delegations may nest below the session's root (a direct child is at depth 1).
    #[arg(long, default_value_t = 4, conflicts_with = "spec")]
    pub max_delegation_depth: u32,

    /// How long a delegation waits for its children, in ms, before the missing ones count as
    /// failed (default: until the session's deadline, if any).
    #[arg(long, conflicts_with = "spec")]
    pub join_timeout_ms: Option<u64>,

    #[command(flatten)]
    pub claims: ClaimArgs,

    #[command(flatten)]
    pub metrics: MetricsArgs,

    #[command(flatten)]
    pub registry: WorkerRegistryArgs,

    #[command(flatten)]
    pub relay_options: RelayArgs,
}

pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: WorkerArgs,
) -> anyhow::Result<ExitCode> {
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
    let grace = Duration::from_secs(args.shutdown_grace_secs);
    let nats = client.client().clone();
    match demo {
        Some(demo) if !args.relay => {
            let demo = Configured {
                inner: demo,
                retry,
                timeout: Duration::from_millis(args.timeout_ms),
                concurrency: args.concurrency.unwrap_or(8),
            };
            serve(Worker::new(client, config, demo), nats, grace).await?;
        }
        _ => {
            let relay = relay::relay(agent.to_string(), args, retry);
            serve(Worker::new(client, config, relay), nats, grace).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `worker` until SIGTERM or Ctrl-C, and its stop within `grace`
/// (`--shutdown-grace-secs`): a stop cut short says how many messages it
/// leaves to redelivery.
async fn serve<A: baton_worker::Agent>(
    worker: Worker<A>,
    nats: async_nats::Client,
    grace: Duration,
) -> anyhow::Result<()> {
    let stats = worker.stats();
    let left: Left = Arc::new(move || {
        format!(
            "{} message(s) in flight stay un-acked; the server redelivers them after ack_wait",
            stats.in_flight()
        )
    });
    let stop = Stop::listen(grace, Some(nats), left);
    worker.run(stop.signal()).await?;
    Ok(())
}

/// The registry profile: a demo type's own, with the command line's
/// capabilities, domains and tier over it.
fn profile(demo: Option<Demo>, registry: &WorkerRegistryArgs) -> baton_worker::Profile {
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
        .with_accepted_after(Duration::from_millis(args.accepted_after_ms))
        .with_compact_events(args.compact_events || !args.whole_events);
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
    if let Some(version) = &args.version {
        let version = baton_proto::Version::new(version.as_str())
            .map_err(|err| anyhow::anyhow!("invalid --version: {err}"))?;
        config = config
            .with_version(version)
            .with_upgrade_next_turn(args.upgrade_next_turn);
    }
    Ok(config)
}

/// `baton worker --spec FILE`: the agent type a spec file describes.
async fn spec_worker(
    nats: &NatsArgs,
    subjects: Subjects,
    path: &std::path::Path,
    args: &WorkerArgs,
) -> anyhow::Result<ExitCode> {
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
    let grace = Duration::from_secs(args.shutdown_grace_secs);
    let nats = client.client().clone();
    match team {
        Some(team) => {
            let agent = baton_worker::Team::new(agent, team);
            serve(Worker::new(client, config, agent), nats, grace).await?;
        }
        None => serve(Worker::new(client, config, agent), nats, grace).await?,
    }
    Ok(ExitCode::SUCCESS)
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

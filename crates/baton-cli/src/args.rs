//! Command-line arguments.

use std::path::PathBuf;

use baton_proto::AgentName;
use clap::{Args, Parser, Subcommand};

/// Baton: multi-agent systems as worker pools on NATS JetStream.
///
/// Each agent type is a pool of `baton worker` processes pulling from its own
/// subject. Agents hand tasks to each other with the full context, by name or by
/// capability through the registry, or delegate child tasks and continue with
/// their results; handoffs are acknowledged, retried, guarded against loops, and
/// end in a terminal event or a dead letter. Agents come from Rust or from spec
/// files (exec, LLM, human). Requires nats-server >= 2.10 with JetStream enabled.
#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub nats: NatsArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Connection settings, following the NATS CLI's environment variables.
#[derive(Debug, Clone, Args)]
pub struct NatsArgs {
    /// NATS server URL, or a comma-separated list of them (default nats://127.0.0.1:4222;
    /// `baton dev` starts its own server when unset). A URL may carry `user:password@` or
    /// `token@`; `tls://` requires TLS.
    #[arg(long, global = true, env = "NATS_URL", hide_env_values = true)]
    pub nats_url: Option<String>,

    /// NATS credentials file (JWT + nkey).
    #[arg(long, global = true, env = "NATS_CREDS")]
    pub creds: Option<PathBuf>,

    /// NATS user name (with --password).
    #[arg(long, global = true, env = "NATS_USER")]
    pub user: Option<String>,

    /// NATS password (with --user).
    #[arg(long, global = true, env = "NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,

    /// NATS authentication token.
    #[arg(long, global = true, env = "NATS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,

    /// NATS nkey seed file (a user seed, as `nk -gen user` writes).
    #[arg(long, global = true, env = "NATS_NKEY")]
    pub nkey: Option<PathBuf>,

    /// CA certificate (PEM) to verify the NATS server with; turns TLS on.
    #[arg(long, global = true, env = "NATS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for TLS client authentication, with --tls-key.
    #[arg(long, global = true, env = "NATS_CERT")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of the client certificate, with --tls-cert.
    #[arg(long, global = true, env = "NATS_KEY")]
    pub tls_key: Option<PathBuf>,

    /// Replicas of every stream and bucket Baton creates: 1 on a single server, 3 on a
    /// cluster. An existing stream with fewer is raised in place where the cluster allows.
    #[arg(long, global = true, env = "BATON_REPLICAS", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=5))]
    pub replicas: u8,

    /// Prefix of this process's reply subjects (default `_INBOX_<role>`, e.g.
    /// `_INBOX_worker_refund`); `baton permissions` grants only it.
    #[arg(long, global = true, env = "BATON_INBOX_PREFIX")]
    pub inbox_prefix: Option<String>,

    /// Subject prefix shared by every Baton process of one deployment.
    #[arg(long, global = true, env = "BATON_PREFIX", default_value = "baton")]
    pub prefix: String,
}

impl NatsArgs {
    /// Replicas of what Baton creates.
    pub fn replicas(&self) -> usize {
        usize::from(self.replicas)
    }

    /// The stream settings these arguments describe.
    pub fn streams(&self) -> baton_worker::StreamSettings {
        baton_worker::StreamSettings {
            replicas: self.replicas(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demo: a local nats-server, the registry, the router, the five demo agents and
    /// the demo tasks; print each session's path, reasons and answer.
    Dev(DevArgs),
    /// Run one worker of an agent type. Start it again (on any machine) to add replicas.
    Worker(Box<WorkerArgs>),
    /// Run the ingress router, which moves tasks from `<prefix>.ingress` to their first agent.
    Router(RouterArgs),
    /// Run a registry replica: answers best-agent lookups from worker heartbeats.
    /// Run two or more for high availability; any replica answers.
    Registry(RegistryArgs),
    /// List the live agent types: instances, tier, capabilities, load, backlog, success ratio.
    /// With --why, rank them for a kind of work and explain each score: fit, tier, load,
    /// what outcomes taught, and similar past sessions.
    Agents(AgentsArgs),
    /// Say how well a finished session went, from 0 (not resolved) to 1 (fully resolved).
    /// The registry credits it to the session's agents and learns from it.
    Feedback(FeedbackArgs),
    /// Print an agent type's notebook: the agents it worked with, in how many sessions, and
    /// how those went (resolved, escalated, failed, reopened, time, cost, feedback).
    Notebook(NotebookArgs),
    /// Publish a task and print its session id (or, with --wait, its outcome).
    Send(SendArgs),
    /// Hold a conversation at the prompt: each line you write is a turn, answered as it is
    /// written by the agent that holds the conversation (after a handoff, the one it was
    /// handed to), with every handoff shown. An agent's question is answered by the next
    /// line. Piped, it reads one turn per line and prints each answer.
    Chat(ChatArgs),
    /// List and show conversations: their turns, who held each, what runs and waits.
    #[command(subcommand)]
    Conversations(ConversationsCommand),
    /// Print a session's events from the start, then follow them until the session ends.
    Watch(WatchArgs),
    /// Run a finished session again as a new session, linked to it: recorded model answers
    /// and tool results are reused until the first input that changed (--set, --model,
    /// --from), so an unchanged replay calls no model. Prints the new session id.
    Replay(ReplayArgs),
    /// Compare two sessions (a session and its replay): where their paths, tool calls,
    /// answers and outcomes part.
    Diff(DiffArgs),
    /// Cancel a session: it ends with `failed`, reason `cancelled`; workers drop its tasks
    /// and stop an agent running one; a task waiting for a person leaves the inbox.
    Cancel(CancelArgs),
    /// Inspect and replay dead letters.
    #[command(subcommand)]
    Dlq(DlqCommand),
    /// Validate agent spec files: every error with its file, line and fix; routes to agent
    /// types that none of the given files defines are warnings. Exits 1 on errors.
    Check(CheckArgs),
    /// What waits for a person: list, show and answer tasks; settle tool calls whose outcome
    /// is unknown, and approve or deny calls that wait for approval.
    #[command(subcommand)]
    Inbox(InboxCommand),
    /// Print the NATS `permissions` block a role needs, to paste into a user of the server
    /// config: a worker of AGENT, the router, a registry replica, a client (send, watch,
    /// cancel, agents, mcp serve) or an operator (dlq, inbox, doctor, console, a2a serve).
    Permissions(PermissionsArgs),
    /// Check a deployment and print each finding with its fix: server versions and
    /// JetStream, replicas against the cluster size, the duplicate window against
    /// redeliveries, max_payload against the claim-check, fsync, and consumers no worker
    /// serves. Exits 1 when a finding is a warning or an error.
    Doctor(DoctorArgs),
    /// Generate Kubernetes manifests from spec files: per agent type a Deployment (the spec in
    /// a ConfigMap, probes on the metrics port) and a KEDA ScaledObject that scales it on its
    /// consumer's lag; the router, two registry replicas, and a kustomization.
    Manifests(ManifestsArgs),
    /// Serve the web console: live sessions with their paths, events, delegations and
    /// context; agent pools; dead letters with replay; the human inbox with answers. Listens
    /// on 127.0.0.1:8080 by default; beyond loopback it needs --access-token.
    Console(ConsoleArgs),
    /// Serve agent types as MCP tools (Model Context Protocol), over stdio or streamable
    /// HTTP, for any MCP host.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Serve the ingress and agent types as A2A agents (Agent2Agent v1.0), with agent cards
    /// built from the registry.
    #[command(subcommand)]
    A2a(A2aCommand),
    /// Benchmark: a chain of no-op agents against a raw JetStream relay, same run.
    Bench(baton_devtools::bench::BenchArgs),
    /// Benchmark the registry: lookups per second and latency with many agents registered.
    BenchRegistry(baton_devtools::bench_registry::BenchRegistryArgs),
}

impl Command {
    /// Whether the command is one a person runs and reads (its logs at
    /// `warn`), rather than a long-running process (at `info`).
    pub fn quiet(&self) -> bool {
        matches!(
            self,
            Self::Send(_)
                | Self::Chat(_)
                | Self::Conversations(_)
                | Self::Watch(_)
                | Self::Cancel(_)
                | Self::Replay(_)
                | Self::Diff(_)
                | Self::Dlq(_)
                | Self::Dev(_)
                | Self::Bench(_)
                | Self::BenchRegistry(_)
                | Self::Agents(_)
                | Self::Feedback(_)
                | Self::Notebook(_)
                | Self::Check(_)
                | Self::Inbox(_)
                | Self::Permissions(_)
                | Self::Doctor(_)
                | Self::Manifests(_)
        )
    }
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Keep the agents running after the demo tasks, until Ctrl-C (try `baton send` meanwhile).
    #[arg(long)]
    pub serve: bool,

    /// How long to wait for each demo session to end, in seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

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

    /// How long in-flight work may take to finish on shutdown, in seconds.
    #[arg(long, default_value_t = 20)]
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

    /// Instance id reported in events (default: random).
    #[arg(long)]
    pub instance: Option<String>,

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
        value_parser = session::amount
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
}

#[derive(Debug, Args)]
pub struct PermissionsArgs {
    /// The role.
    #[arg(value_enum)]
    pub role: baton_ops::RoleKind,

    /// The worker's agent type (worker role only).
    pub agent: Option<AgentName>,

    /// Agent types this worker may publish to: those it hands off, delegates, escalates and
    /// answers to. Without it, every agent type is allowed (and the block says so).
    #[arg(long, value_delimiter = ',', value_name = "AGENT,...")]
    pub to: Vec<AgentName>,

    /// Grant the inbox bucket: the worker runs a human agent, or an LLM agent with [[mcp]]
    /// tools (its tool calls wait there for a person: unknown outcomes and approvals).
    #[arg(long)]
    pub human: bool,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters: sequence, agent, reason, session and detail.
    Ls {
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Publish a dead letter again to its original subject (as a new message), then remove it.
    Replay {
        /// Sequence number shown by `baton dlq ls`.
        seq: u64,
        /// Keep the dead letter after replaying it.
        #[arg(long)]
        keep: bool,
        /// Give the session this many more ms from now (a `deadline_exceeded` letter needs it).
        #[arg(long, value_name = "MS")]
        extend_deadline: Option<u64>,
    },
}

mod a2a;
mod claims;
mod console;
mod conversation;
mod doctor;
mod inbox;
mod manifests;
mod mcp;
mod metrics;
mod registry;
mod relay;
mod session;
mod worker_registry;
pub use a2a::{A2aCommand, A2aServeArgs};
pub use claims::ClaimArgs;
pub use console::ConsoleArgs;
pub use conversation::{ChatArgs, ConversationsCommand};
pub use doctor::DoctorArgs;
pub use inbox::{CheckArgs, InboxCommand};
pub use manifests::ManifestsArgs;
pub use mcp::{McpCommand, McpServeArgs};
pub use metrics::MetricsArgs;
pub use registry::{AgentsArgs, FeedbackArgs, NotebookArgs, RegistryArgs};
pub use relay::RelayArgs;
pub use session::{CancelArgs, DiffArgs, ReplayArgs, SendArgs, Waiting, WatchArgs};
pub use worker_registry::{Events, Live, Settle, WorkerRegistryArgs};

//! `baton a2a serve`: the ingress and agent types as A2A agents.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use baton_proto::Subjects;
use clap::{Args, Subcommand};

use super::mcp::agent_names;
use super::stop::Stop;
use crate::nats::NatsArgs;

/// `baton a2a`: Baton agent types as A2A agents.
#[derive(Debug, Subcommand)]
pub enum A2aCommand {
    /// Serve the ingress and agent types as A2A agents (Agent2Agent v1.0, JSON-RPC with SSE
    /// streaming). The ingress's card is at /.well-known/agent-card.json and takes calls at /;
    /// agent type NAME's at /agents/NAME/.well-known/agent-card.json and /agents/NAME. A task
    /// is a session (`baton router` must run); a session waiting for a person is
    /// input-required, and the client's next message to it is the answer; CancelTask cancels
    /// the session. Runs as the operator role.
    Serve(A2aServeArgs),
}

/// What `baton a2a serve` exposes, and where.
#[derive(Debug, Args)]
pub struct A2aServeArgs {
    /// Listen on this address. Beyond loopback it needs --access-token.
    #[arg(long, env = "BATON_A2A_LISTEN", default_value = "127.0.0.1:8070")]
    pub listen: SocketAddr,

    /// The agent types to expose, comma-separated [default: every live one the registry
    /// knows, described from it].
    #[arg(long, value_delimiter = ',', value_name = "AGENT,...")]
    pub agents: Vec<String>,

    /// Token JSON-RPC calls must send as `Authorization: Bearer <token>` (the cards stay
    /// public and declare the scheme). Required beyond loopback; checked on loopback too
    /// when set.
    #[arg(
        long,
        env = "BATON_A2A_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub access_token: Option<String>,

    /// A file naming the callers, one `NAME TOKEN` per line (`#` comments): each call must
    /// carry one of the tokens, and a caller continues and reads only the conversations and
    /// tasks it started; another caller's context or task id is refused, or not found.
    /// Instead of --access-token; satisfies the token rule beyond loopback.
    #[arg(
        long,
        env = "BATON_A2A_CALLERS",
        value_name = "FILE",
        conflicts_with = "access_token"
    )]
    pub callers: Option<std::path::PathBuf>,

    /// The base URL clients reach this server at, written into the cards (behind a proxy)
    /// [default: http:// and the Host the client used].
    #[arg(long, env = "BATON_A2A_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,

    /// How long a blocking SendMessage waits for its session to end or wait for input, in
    /// seconds; then it answers with the task still working.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub timeout_secs: u64,

    /// The most tokens a session started here may spend on models. A message may ask for
    /// less with `metadata.budget_tokens`, never for more. [default: none, or the router's
    /// --default-budget-tokens]
    #[arg(long, env = "BATON_A2A_BUDGET_TOKENS", value_name = "TOKENS", allow_negative_numbers = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_tokens: Option<u64>,

    /// The most a session started here may cost, as an amount (e.g. 0.50) in the currency
    /// of the agents' [llm.price] tables. A message may ask for less
    /// with `metadata.budget_cost`, never for more. [default: none, or
    /// the router's --default-budget-cost]
    #[arg(long, env = "BATON_A2A_BUDGET_COST", value_name = "AMOUNT", allow_negative_numbers = true, value_parser = crate::sessions::amount)]
    pub budget_cost: Option<u64>,

    /// What a message does when a turn of its context (its conversation) runs: `enqueue` (it
    /// runs next, in arrival order, and sees the answer before it), `reject` (an error that
    /// names the running turn) or `interrupt` (the running turn is cancelled, and a new one runs
    /// with its message and this one). A message's metadata `overlap` may choose for itself.
    #[arg(long, env = "BATON_A2A_OVERLAP", value_name = "POLICY", default_value = "enqueue", value_parser = crate::conversations::overlap)]
    pub overlap: baton_proto::Overlap,

    /// How long open calls may take to finish on SIGTERM or Ctrl-C, in seconds; the server
    /// then exits and cuts those still open. Their tasks are sessions, which go on without
    /// it: a client reads them again with GetTask, here or at another replica. A second
    /// SIGTERM or Ctrl-C exits at once.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub shutdown_grace_secs: u64,
}

/// `baton a2a serve`: the ingress and agent types as A2A agents, as the
/// operator role (it starts sessions, answers the inbox and cancels).
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    command: A2aCommand,
) -> anyhow::Result<ExitCode> {
    let A2aCommand::Serve(args) = command;
    let only = agent_names(&args.agents)?;
    if let Some(path) = &args.callers {
        // A bad file is told before anything else is tried.
        baton_gateway::callers::Callers::load(path)?;
    }
    let client = crate::nats::client(nats, subjects, baton_ops::RoleKind::Operator).await?;
    let stop = Stop::listen(
        Duration::from_secs(args.shutdown_grace_secs),
        Some(client.jetstream().client()),
        super::stop::nothing(
            "open calls are cut; their tasks are sessions that go on, and GetTask reads them",
        ),
    );
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
    baton_a2a::serve(client, settings, stop.signal()).await?;
    Ok(ExitCode::SUCCESS)
}

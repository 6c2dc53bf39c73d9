//! The options of a `--relay` worker.

use std::time::Duration;

use baton_devtools::relay::{Delegation, Relay};
use baton_proto::AgentName;
use baton_worker::RetryPolicy;
use clap::Args;

use super::WorkerArgs;

/// Behaviour of a `--relay` agent.
#[derive(Debug, Args)]
#[command(next_help_heading = "Relay options (with --relay)")]
pub struct RelayArgs {
    /// Hand off to this agent type; without it the relay completes the session.
    #[arg(long, value_name = "AGENT")]
    pub next: Option<AgentName>,

    /// Hand off to the registry's best agent with these capabilities (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CAP,...",
        conflicts_with = "next"
    )]
    pub next_requires: Option<Vec<String>>,

    /// Fail retryably on the first N attempts.
    #[arg(long, default_value_t = 0)]
    pub fail_attempts: u32,

    /// Fail fatally (dead-letter at once).
    #[arg(long)]
    pub fatal: bool,

    /// Decline every task.
    #[arg(long)]
    pub reject: bool,

    /// Escalate every task: to the registry's best agent of a higher tier, else the fallback.
    #[arg(long)]
    pub escalate: bool,

    /// Work this long (ms) before answering.
    #[arg(long, default_value_t = 0)]
    pub work_ms: u64,

    /// Leave the context unchanged (for benchmarks).
    #[arg(long)]
    pub quiet: bool,

    /// Delegate to these agent types (comma-separated, repeats allowed) and
    /// complete with their results.
    #[arg(long, value_delimiter = ',', value_name = "AGENT,...", conflicts_with_all = ["next", "next_requires"])]
    pub delegate: Option<Vec<AgentName>>,

    /// How the delegation runs.
    #[arg(long, default_value = "parallel", value_parser = ["serial", "parallel", "async", "chain"])]
    pub delegate_mode: String,

    /// For a chain: run this agent type on a failed step instead of stopping.
    #[arg(long, value_name = "AGENT", conflicts_with = "recover_value")]
    pub recover: Option<AgentName>,

    /// For a chain: use this text as a failed step's output instead of stopping.
    #[arg(long)]
    pub recover_value: Option<String>,
}

/// A relay agent as the command line describes it.
pub fn relay(name: String, args: WorkerArgs, retry: RetryPolicy) -> Relay {
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

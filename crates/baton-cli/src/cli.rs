//! The command line: the global options and the table of commands. Each
//! command's module holds its arguments and its `run`.

use std::process::ExitCode;

use baton_proto::Subjects;
use clap::{Parser, Subcommand};

use crate::conversations::{chat, lifecycle};
use crate::deploys::{eval, retire, rollout, versions};
use crate::learning::{agents, feedback, notebook};
use crate::nats::NatsArgs;
use crate::operations::{bench, check, dlq, doctor, inbox, manifests, new, permissions};
use crate::processes::{a2a, console, dev, mcp, registry, router, worker};
use crate::sessions::{cancel, diff, replay, send, watch};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the demo: a local nats-server, the registry, the router, the five demo agents and
    /// the demo tasks; print each session's path, reasons and answer.
    Dev(dev::DevArgs),
    /// Run one worker of an agent type. Start it again (on any machine) to add replicas.
    #[command(disable_version_flag = true)]
    Worker(Box<worker::WorkerArgs>),
    /// Run the ingress router, which moves tasks from `<prefix>.ingress` to their first agent.
    Router(router::RouterArgs),
    /// Run a registry replica: answers best-agent lookups from worker heartbeats.
    /// Run two or more for high availability; any replica answers.
    Registry(registry::RegistryArgs),
    /// List the live agent types: instances, tier, capabilities, load, backlog, success ratio.
    /// With --why, rank them for a kind of work and explain each score: fit, tier, load,
    /// what outcomes taught, and similar past sessions.
    Agents(agents::AgentsArgs),
    /// Say how well a finished session went, from 0 (not resolved) to 1 (fully resolved).
    /// The registry credits it to the session's agents and learns from it.
    Feedback(feedback::FeedbackArgs),
    /// Print an agent type's notebook: the agents it worked with, in how many sessions, and
    /// how those went (resolved, escalated, failed, reopened, time, cost, feedback).
    Notebook(notebook::NotebookArgs),
    /// Publish a task and print its session id (or, with --wait, its outcome).
    Send(send::SendArgs),
    /// Hold a conversation at the prompt: each line you write is a turn, answered as it is
    /// written by the agent that holds the conversation (after a handoff, the one it was
    /// handed to), with every handoff shown. An agent's question is answered by the next
    /// line. Piped, it reads one turn per line and prints each answer.
    Chat(chat::ChatArgs),
    /// List and show conversations: their turns, who held each, what runs and waits.
    #[command(subcommand)]
    Conversations(lifecycle::ConversationsCommand),
    /// Print a session's events from the start, then follow them until the session ends.
    Watch(watch::WatchArgs),
    /// Run a finished session again as a new session, linked to it: recorded model answers
    /// and tool results are reused until the first input that changed (--set, --model,
    /// --from), so an unchanged replay calls no model. Prints the new session id.
    Replay(replay::ReplayArgs),
    /// Compare two sessions (a session and its replay): where their paths, tool calls,
    /// answers and outcomes part.
    Diff(diff::DiffArgs),
    /// Cancel a session: it ends with `failed`, reason `cancelled`; workers drop its tasks
    /// and stop an agent running one; a task waiting for a person leaves the inbox.
    Cancel(cancel::CancelArgs),
    /// Inspect and replay dead letters.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Validate agent spec files: every error with its file, line and fix; routes to agent
    /// types that none of the given files defines are warnings. Exits 1 on errors.
    Check(check::CheckArgs),
    /// Write a new agent to start from: `baton new agent --python NAME` writes NAME.py (a
    /// Python agent with a journaled step) and NAME.toml (its spec).
    #[command(subcommand)]
    New(new::NewCommand),
    /// What waits for a person: list, show and answer tasks; settle tool calls whose outcome
    /// is unknown, and approve or deny calls that wait for approval.
    #[command(subcommand)]
    Inbox(inbox::InboxCommand),
    /// Print the NATS `permissions` block a role needs, to paste into a user of the server
    /// config: a worker of AGENT, the router, a registry replica, a client (send, watch,
    /// cancel, agents, mcp serve) or an operator (dlq, inbox, doctor, console, a2a serve).
    #[command(disable_version_flag = true)]
    Permissions(permissions::PermissionsArgs),
    /// Check a deployment and print each finding with its fix: server versions and
    /// JetStream, replicas against the cluster size, the duplicate window against
    /// redeliveries, max_payload against the claim-check, fsync, and consumers no worker
    /// serves. Exits 1 when a finding is a warning or an error.
    Doctor(doctor::DoctorArgs),
    /// Generate Kubernetes manifests from spec files: per agent type a Deployment (the spec in
    /// a ConfigMap, probes on the metrics port) and a KEDA ScaledObject that scales it on its
    /// consumer's lag; the router, two registry replicas, and a kustomization.
    Manifests(manifests::ManifestsArgs),
    /// Serve the web console: live sessions with their paths, events, delegations and
    /// context; agent pools; dead letters with replay; the human inbox with answers. Listens
    /// on 127.0.0.1:8080 by default; beyond loopback it needs --access-token.
    Console(console::ConsoleArgs),
    /// Serve agent types as MCP tools (Model Context Protocol), over stdio or streamable
    /// HTTP, for any MCP host.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Serve the ingress and agent types as A2A agents (Agent2Agent v1.0), with agent cards
    /// built from the registry.
    #[command(subcommand)]
    A2a(a2a::A2aCommand),
    /// Roll a version of an agent type out: send a share of its new sessions and conversations
    /// to it (--to V --weight PCT; 100 makes it current), or back to the previous version at
    /// once (--back). Sessions already pinned to a version finish on it. Without options,
    /// show the rollout.
    Rollout(rollout::RolloutArgs),
    /// Show each version of an agent type: its state (current, ramping, waiting for a
    /// rollout, draining, retired), weight, live workers, the messages, inbox items,
    /// conversations and delegations pinned to it, and the rollout's latest changes.
    Versions(versions::VersionsArgs),
    /// Try a version of an agent type on recorded sessions before it takes live traffic: the
    /// most recent finished sessions that reached TYPE run again with TYPE on --version (the
    /// hops before it reuse their records; its model or program is called anew). A tool call
    /// recorded with the same arguments gets its recorded result, a read-only tool may be
    /// called again, and any other call is never made: the session stops as `would_write`.
    /// Prints each session (outcome, same or different answer, tokens, cost, latency) and the
    /// success shares with intervals. Evaluations never count as live outcomes.
    #[command(disable_version_flag = true)]
    Eval(eval::EvalArgs),
    /// Retire a version of an agent type once nothing is pinned to it: no task waiting or in
    /// flight, no inbox item, no conversation, no delegation. Exits 1 naming what still holds
    /// it. --upgrade-conversations moves its idle conversations to the current version at
    /// their next turn.
    Retire(retire::RetireArgs),
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
                | Self::New(_)
                | Self::Inbox(_)
                | Self::Permissions(_)
                | Self::Doctor(_)
                | Self::Manifests(_)
                | Self::Rollout(_)
                | Self::Versions(_)
                | Self::Eval(_)
                | Self::Retire(_)
        )
    }

    /// Runs the command, connecting with `nats` under `subjects`.
    pub async fn run(self, nats: &NatsArgs, subjects: Subjects) -> anyhow::Result<ExitCode> {
        match self {
            Self::Dev(args) => dev::run(nats, subjects, args).await,
            Self::Worker(args) => worker::run(nats, subjects, *args).await,
            Self::Router(args) => router::run(nats, subjects, args).await,
            Self::Registry(args) => registry::run(nats, subjects, args).await,
            Self::Agents(args) => agents::run(nats, subjects, args).await,
            Self::Feedback(args) => feedback::run(nats, subjects, args).await,
            Self::Notebook(args) => notebook::run(nats, subjects, args).await,
            Self::Send(args) => send::run(nats, subjects, args).await,
            Self::Chat(args) => chat::run(nats, subjects, args).await,
            Self::Conversations(command) => lifecycle::run(nats, subjects, command).await,
            Self::Watch(args) => watch::run(nats, subjects, args).await,
            Self::Cancel(args) => cancel::run(nats, subjects, args).await,
            Self::Replay(args) => replay::run(nats, subjects, args).await,
            Self::Diff(args) => diff::run(nats, subjects, args).await,
            Self::Dlq(command) => dlq::run(nats, subjects, command).await,
            Self::Check(args) => Ok(check::run(&args, nats, subjects).await),
            Self::New(command) => new::run(command),
            Self::Inbox(command) => inbox::run(nats, subjects, command).await,
            Self::Doctor(args) => doctor::run(nats, subjects, args).await,
            Self::Manifests(args) => manifests::run(&args, &subjects),
            Self::Console(args) => console::run(nats, subjects, args).await,
            Self::Mcp(command) => mcp::run(nats, subjects, command).await,
            Self::A2a(command) => a2a::run(nats, subjects, command).await,
            Self::Permissions(args) => permissions::run(nats, &subjects, args),
            Self::Rollout(args) => rollout::run(nats, subjects, args).await,
            Self::Versions(args) => versions::run(nats, subjects, args).await,
            Self::Eval(args) => eval::run(nats, subjects, args).await,
            Self::Retire(args) => retire::run(nats, subjects, args).await,
            Self::Bench(args) => bench::run(nats, args).await,
            Self::BenchRegistry(args) => bench::registry(nats, args).await,
        }
    }
}

//! `baton permissions`: the NATS permissions block a role needs.

use std::process::ExitCode;

use baton_proto::{AgentName, Subjects};
use clap::Args;

use crate::nats::NatsArgs;

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

    /// The version the worker runs (`version = "..."` in its spec, or `baton worker
    /// --version`): grant its version's consumer, agent-<AGENT>@<VERSION>.
    #[arg(long, value_name = "VERSION", requires = "agent")]
    pub version: Option<String>,

    /// An MCP server (its `[[mcp]] url`) the worker signs in to with the sign-in `baton mcp
    /// login` kept (`auth = "oauth"`): grant reading and refreshing that server's sign-in,
    /// and no other's. Repeat for more servers.
    #[arg(long = "mcp-login", value_name = "URL", requires = "agent")]
    pub mcp_logins: Vec<String>,
}

/// Prints the block.
pub fn run(
    nats: &NatsArgs,
    subjects: &Subjects,
    args: PermissionsArgs,
) -> anyhow::Result<ExitCode> {
    let role = baton_ops::Role::new(args.role, args.agent)?;
    let version = (args.version.as_deref())
        .map(baton_proto::Version::new)
        .transpose()
        .map_err(|err| anyhow::anyhow!("invalid --version: {err}"))?;
    let grants = baton_ops::Grants {
        to: args.to,
        human: args.human,
        version,
        mcp_logins: args.mcp_logins,
    };
    let inbox = nats.inbox_prefix.as_deref();
    print!(
        "{}",
        baton_ops::permissions::render(&role, subjects, inbox, &grants)
    );
    Ok(ExitCode::SUCCESS)
}

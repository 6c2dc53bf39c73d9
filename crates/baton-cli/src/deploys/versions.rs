//! `baton versions TYPE`: each version of an agent type, what it is in
//! the rollout, what it still holds, and the rollout's latest changes.

use std::process::ExitCode;

use baton_proto::Subjects;
use clap::Args;

use super::agent_type;
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct VersionsArgs {
    /// The agent type.
    pub agent: String,

    /// Print as JSON.
    #[arg(long)]
    pub json: bool,

    /// How long to wait for the registry's count of live workers, in ms.
    #[arg(long, default_value_t = 1500)]
    pub registry_timeout_ms: u64,
}

/// `baton versions`: each version of an agent type and what it holds.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: VersionsArgs,
) -> anyhow::Result<ExitCode> {
    let agent = agent_type(&args.agent)?;
    let versions = super::open(nats, subjects, args.registry_timeout_ms).await?;
    let standing = versions.standing(&agent).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&standing)?);
    } else {
        super::print(&standing);
    }
    Ok(ExitCode::SUCCESS)
}

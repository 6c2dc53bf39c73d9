//! `baton retire TYPE VERSION`: marks a version of an agent type retired
//! once nothing is pinned to it, and says what is when something is. With
//! `--upgrade-conversations`, its idle conversations move to the current
//! version at their next turn and no longer hold it.

use std::process::ExitCode;

use baton_proto::{Subjects, now_ms};
use clap::Args;

use super::{agent_type, version};
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct RetireArgs {
    /// The agent type.
    pub agent: String,

    /// The version to retire; it may be neither current nor ramping.
    #[arg(value_name = "VERSION")]
    pub label: String,

    /// Move the version's idle conversations to the current version at their next turn
    /// (recorded in each conversation); from then on they no longer hold it.
    #[arg(long)]
    pub upgrade_conversations: bool,
}

/// `baton retire`: exits 0 once the version is retired, 1 with what still
/// holds it.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RetireArgs,
) -> anyhow::Result<ExitCode> {
    let agent = agent_type(&args.agent)?;
    let version = version(&args.label)?;
    let versions = super::open(nats, subjects, 1500).await?;
    let (mut rollout, _) = versions.rollout(&agent).await?;
    let v = version.as_str();
    match rollout.role(v) {
        baton_proto::VersionRole::Current => anyhow::bail!(
            "version {v} is {agent}'s current version: roll another out first (`baton rollout {agent} --to VERSION --weight 100`), then retire {v}"
        ),
        baton_proto::VersionRole::Ramping => anyhow::bail!(
            "version {v} of {agent} is being rolled out: end its ramp first (`baton rollout {agent} --back`)"
        ),
        baton_proto::VersionRole::Retired => {
            println!("version {v} of {agent} is retired already");
            return Ok(ExitCode::SUCCESS);
        }
        baton_proto::VersionRole::Draining | baton_proto::VersionRole::Waiting => {}
    }
    let known =
        rollout.previous.as_deref() == Some(v) || versions.has_run(&agent, &version).await?;
    anyhow::ensure!(
        known,
        "version {v} of {agent} is unknown: no worker of it has run (no consumer {}); `baton versions {agent}` lists its versions",
        Subjects::version_consumer(&agent, &version)
    );
    if args.upgrade_conversations && !rollout.upgrading.iter().any(|u| u == v) {
        rollout = versions
            .change(&agent, |rollout| {
                Ok::<_, baton_nats::Error>(rollout.upgrade(&version, now_ms()))
            })
            .await?;
        println!(
            "{agent}'s conversations on version {v} move to version {} at their next turn",
            rollout.current
        );
    }
    let moving = rollout.upgrading.iter().any(|u| u == v);
    let held = versions.held(&agent, &rollout.upgrading).await?;
    let held = held.get(v).copied().unwrap_or_default();
    if !held.is_empty() {
        eprintln!(
            "version {v} of {agent} still holds {}: keep its workers until `baton versions {agent}` shows nothing pinned to it{}",
            held.said(),
            if moving || held.conversations == 0 {
                String::new()
            } else {
                ", or move its conversations with --upgrade-conversations".to_owned()
            }
        );
        return Ok(ExitCode::FAILURE);
    }
    versions
        .change(&agent, |rollout| {
            Ok::<_, baton_nats::Error>(rollout.retire(&version, now_ms()))
        })
        .await?;
    println!("version {v} of {agent} is retired: nothing is pinned to it; remove its workers");
    Ok(ExitCode::SUCCESS)
}

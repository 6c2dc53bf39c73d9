//! `baton rollout TYPE`: sends a share of an agent type's new sessions and
//! conversations to a version (`--to V --weight PCT`; 100 makes it
//! current), or sends them back to the previous version at once (`--back`).
//! Without either, it shows the rollout. Sessions already pinned to a
//! version finish on it.

use std::process::ExitCode;

use baton_client::versions::{Gathered, Standing};
use baton_proto::{AgentName, Rollout, Subjects, now_ms};
use clap::Args;

use super::{agent_type, version};
use crate::nats::NatsArgs;

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The agent type.
    pub agent: String,

    /// The version to roll out; it must have a live worker.
    #[arg(long, value_name = "VERSION", conflicts_with = "back")]
    pub to: Option<String>,

    /// With --to: the percent of new sessions and conversations it takes, 0 to 100. 100 makes
    /// it the current version; 0 ends its ramp.
    #[arg(long, value_name = "PCT", requires = "to", default_value_t = 100,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub weight: u8,

    /// Send new sessions back to the previous version at once (every router and worker
    /// follows within a second). Sessions pinned to the newer version finish on it.
    #[arg(long)]
    pub back: bool,

    /// Roll out even when no registry can say that the version has live workers.
    #[arg(long)]
    pub force: bool,

    /// How long to wait for the registry's count of live workers, in ms.
    #[arg(long, default_value_t = 1500)]
    pub registry_timeout_ms: u64,

    #[command(flatten)]
    pub gated: super::gated::GatedArgs,
}

/// `baton rollout`: changes (or shows) where an agent type's new work goes.
pub async fn run(
    nats: &NatsArgs,
    subjects: Subjects,
    args: RolloutArgs,
) -> anyhow::Result<ExitCode> {
    let agent = agent_type(&args.agent)?;
    let to = args.to.as_deref().map(version).transpose()?;
    let plan = args.gated.plan(to.as_ref())?;
    let versions = super::open(nats, subjects, args.registry_timeout_ms).await?;
    let (mut rollout, _) = versions.rollout(&agent).await?;
    let gathered = versions.gather(&agent, &rollout).await?;
    if let Some(to) = &to {
        live(&gathered, &agent, &rollout, to.as_str(), args.force)?;
    }
    if let Some(held) = args.gated.held() {
        rollout = super::gated::hold(&versions, &agent, held).await?;
        println!("{}", said(&rollout));
    } else if let Some(plan) = plan {
        rollout = super::gated::start(&versions, &agent, plan).await?;
        println!("{}", said(&rollout));
    } else if to.is_some() || args.back {
        // Applied to the stored rollout, again if another operator changed
        // it meanwhile.
        rollout = versions
            .change(&agent, |rollout| match &to {
                Some(to) => {
                    rollout.ramp_to(to, args.weight, now_ms());
                    // A person's share ends a gated rollout: the routers
                    // no longer move it.
                    if let Some(gated) = rollout.gated.as_mut().filter(|g| g.ended.is_none()) {
                        gated.ended = Some("by_hand".to_owned());
                    }
                    Ok(true)
                }
                None if rollout.back(now_ms()) => {
                    // A person's --back ends a gated rollout too.
                    if let Some(gated) = rollout.gated.as_mut().filter(|g| g.ended.is_none()) {
                        gated.ended = Some("back".to_owned());
                    }
                    Ok(true)
                }
                None => Err(anyhow::anyhow!(
                    "agent type {agent} has no earlier version to go back to (current: {})",
                    rollout.current
                )),
            })
            .await?;
        println!("{}", said(&rollout));
    }
    super::print(&Standing::of(&rollout, &gathered));
    Ok(ExitCode::SUCCESS)
}

/// Fails a rollout to `version` when the registry does not count a live
/// worker of it (or no registry answers, without `force`).
fn live(
    gathered: &Gathered,
    agent: &AgentName,
    rollout: &Rollout,
    version: &str,
    force: bool,
) -> anyhow::Result<()> {
    if rollout.retired.iter().any(|retired| retired == version) {
        anyhow::bail!("version {version} of {agent} is retired: start workers of another version");
    }
    let workers = gathered.workers_of(version);
    if workers.is_some_and(|n| n > 0) || force {
        return Ok(());
    }
    let hint = format!(
        "start its workers first (`version = \"{version}\"` in the spec, or `baton worker --version {version}`)"
    );
    if workers.is_some() {
        anyhow::bail!("no live worker runs version {version} of {agent}: {hint}");
    }
    anyhow::bail!(
        "no registry answered, so it is not known whether version {version} of {agent} has live workers: start a registry (`baton registry`), or pass --force"
    )
}

/// What `rollout` now does, in a sentence.
fn said(rollout: &Rollout) -> String {
    let gated = rollout.gated.as_ref().filter(|g| g.ended.is_none());
    let gated = gated.map_or_else(String::new, |gated| {
        let held = if gated.paused.is_some() {
            ", paused"
        } else {
            ""
        };
        format!(
            " (gated{held}: step {} of {}, {:?}; the routers promote or roll back by {})",
            gated.step + 1,
            gated.steps.len(),
            gated.steps,
            (gated.gates.iter())
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    });
    let now = match &rollout.ramp {
        Some(ramp) => format!(
            "{}: {}% of new sessions go to version {}, the rest to {}",
            rollout.agent, ramp.weight, ramp.version, rollout.current
        ),
        None => format!(
            "{}: new sessions go to version {}",
            rollout.agent, rollout.current
        ),
    };
    format!("{now}{gated}")
}

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
    let (rollout, _) = versions.rollout(&agent).await?;
    let analysis = versions.analysis(&rollout).await?;
    let decisions = versions.decisions(&agent).await?;
    if args.json {
        let mut shown = serde_json::to_value(&standing)?;
        shown["analysis"] = serde_json::to_value(&analysis)?;
        shown["decisions"] = serde_json::to_value(&decisions)?;
        println!("{}", serde_json::to_string_pretty(&shown)?);
    } else {
        super::print(&standing);
        if let Some(analysis) = &analysis {
            print_analysis(analysis);
        }
        if !decisions.is_empty() {
            println!("gated rollout decisions, latest last:");
            for decision in decisions.iter().rev().take(DECISIONS_SHOWN).rev() {
                println!("  {}", said(decision));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How many decisions the text shows (`--json` has them all).
const DECISIONS_SHOWN: usize = 20;

/// A gated rollout's step, its two sides and what the gates say now.
fn print_analysis(analysis: &baton_client::versions::Analysis) {
    let gated = &analysis.gated;
    let held = if gated.paused.is_some() {
        " (paused)"
    } else {
        ""
    };
    println!(
        "gated rollout of version {}{held}: step {} of {} ({}%), {}s each at least, {} sessions of it before a decision",
        gated.version,
        gated.step + 1,
        gated.steps.len(),
        gated.weight(),
        gated.interval_ms / 1000,
        gated.min_sessions
    );
    for side in [&analysis.base, &analysis.new] {
        println!("  {}", side_said(side));
    }
    for reading in &analysis.readings {
        println!("  {}", reading_said(reading));
    }
    println!("  now: {} ({})", analysis.verdict, analysis.why);
}

/// One version's sessions in a step, in a line.
fn side_said(side: &baton_proto::Side) -> String {
    let ms = |v: Option<u64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v}ms"));
    let cost = side
        .cost_micros
        .map_or_else(|| "-".to_owned(), |c| format!("{:.6}", c / 1e6));
    format!(
        "version {}: {} sessions, {} succeeded, mean cost {cost}, p50 {}, p95 {}",
        side.version,
        side.sessions,
        side.succeeded,
        ms(side.p50_ms),
        ms(side.p95_ms)
    )
}

/// A gate as read, in a line.
fn reading_said(reading: &baton_proto::Reading) -> String {
    let estimate = reading
        .estimate
        .map_or_else(|| "-".to_owned(), |e| format!("{e:.2}"));
    let within = reading
        .within
        .map(|(low, high)| format!(" (within {low:.1} to {high:.1})"))
        .unwrap_or_default();
    format!("{}: {estimate}{within}: {}", reading.gate, reading.verdict)
}

/// A decision, in a line.
fn said(decision: &baton_proto::RolloutDecision) -> String {
    let sides = match (&decision.base, &decision.new) {
        (Some(base), Some(new)) => format!(
            "; {} {}/{} ok, {} {}/{} ok",
            base.version, base.succeeded, base.sessions, new.version, new.succeeded, new.sessions
        ),
        _ => String::new(),
    };
    format!(
        "{} {} version {} at step {} ({}% -> {}%), by {}: {}{sides}",
        baton_gateway::text::utc(decision.at),
        decision.what,
        decision.version,
        decision.step + 1,
        decision.weight,
        decision.next_weight,
        decision.by,
        decision.why
    )
}

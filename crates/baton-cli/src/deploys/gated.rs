//! `baton rollout TYPE --to V --steps ... --gate ...`: a rollout the
//! routers move by outcomes (`--pause`, `--resume` hold it by hand).

use baton_client::versions::Versions;
use baton_proto::{AgentName, GateRule, Gated, Rollout, RolloutDecision, Version, now_ms};
use clap::Args;

/// The flags of a gated rollout.
#[derive(Debug, Args)]
pub struct GatedArgs {
    /// With --to: roll out in these steps (percent of new sessions, rising, ending at 100),
    /// each promoted or rolled back by the routers as the gates say, e.g. 5,25,50,100.
    #[arg(long, value_delimiter = ',', value_name = "PCT,...", requires = "to")]
    pub steps: Vec<u8>,

    /// With --steps: how long each step lasts at least: `15s`, `10m`, `1h`, `1d` (a number alone is
    /// seconds).
    #[arg(
        long,
        value_name = "DURATION",
        requires = "steps",
        default_value = "10m"
    )]
    pub interval: String,

    /// With --steps: the new version's sessions a step needs (within the step) before any
    /// decision.
    #[arg(long, value_name = "N", requires = "steps", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub min_sessions: u32,

    /// With --steps: what must hold to go on, comparing the new version's sessions with the
    /// current version's within the step: `success >= -2pt` (the share that succeeded, in
    /// percentage points), `cost <= 1.2x`, `p50 <= 1.5x` or `p95 <= 1.5x` (ratios).
    /// Repeatable [default: "success >= -2pt"].
    #[arg(long = "gate", value_name = "GATE", requires = "steps")]
    pub gates: Vec<String>,

    /// With --steps: a session escalated to a person does not count as a failure (by
    /// default it does); it counts by how it ends.
    #[arg(long, requires = "steps")]
    pub escalation_is_not_failure: bool,

    /// Hold a gated rollout where it is: no step is promoted or rolled back until --resume.
    #[arg(long, conflicts_with_all = ["to", "back", "resume"])]
    pub pause: bool,

    /// Let a paused gated rollout go on; its step starts again from now.
    #[arg(long, conflicts_with_all = ["to", "back"])]
    pub resume: bool,
}

/// A person's hold on a gated rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Pause,
    Resume,
}

impl GatedArgs {
    /// The gated rollout to `to` the flags ask for, checked; `None` without
    /// `--steps`.
    pub fn plan(&self, to: Option<&Version>) -> anyhow::Result<Option<Gated>> {
        let Some(version) = to.filter(|_| !self.steps.is_empty()) else {
            return Ok(None);
        };
        if let Some(wrong) = Gated::bad_steps(&self.steps) {
            anyhow::bail!("--steps: {wrong}");
        }
        let interval_ms = Gated::interval_ms(&self.interval).ok_or_else(|| {
            anyhow::anyhow!(
                "--interval {:?} is not a duration: write e.g. 15s, 10m or 1h",
                self.interval
            )
        })?;
        let texts = if self.gates.is_empty() {
            vec!["success >= -2pt".to_owned()]
        } else {
            self.gates.clone()
        };
        let gates = (texts.iter())
            .map(|text| text.parse::<GateRule>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|wrong| anyhow::anyhow!("--gate: {wrong}"))?;
        let mut plan = Gated::plan(
            version.clone(),
            self.steps.clone(),
            (interval_ms, self.min_sessions),
            gates,
        );
        plan.escalated_fails = !self.escalation_is_not_failure;
        Ok(Some(plan))
    }

    /// `--pause` or `--resume`, if given.
    pub fn held(&self) -> Option<Held> {
        match (self.pause, self.resume) {
            (true, _) => Some(Held::Pause),
            (_, true) => Some(Held::Resume),
            _ => None,
        }
    }
}

/// Starts `plan` on `agent`'s rollout, and records the start.
pub async fn start(versions: &Versions, agent: &AgentName, plan: Gated) -> anyhow::Result<Rollout> {
    let stored = versions
        .change(agent, |rollout: &mut Rollout| {
            if let Some(under_way) = rollout.gated.as_ref().filter(|g| g.ended.is_none()) {
                anyhow::bail!(
                    "a gated rollout of version {} of {agent} is under way: end it first (`baton rollout {agent} --back`), or hold it (--pause)",
                    under_way.version
                );
            }
            if *rollout.current == *plan.version {
                anyhow::bail!(
                    "version {} is already current for {agent}: nothing to roll out",
                    plan.version
                );
            }
            rollout.start_gated(plan.clone(), now_ms());
            Ok(true)
        })
        .await?;
    note(versions, &stored, "start", "started by a person").await?;
    Ok(stored)
}

/// Pauses or resumes `agent`'s gated rollout, and records it.
pub async fn hold(versions: &Versions, agent: &AgentName, held: Held) -> anyhow::Result<Rollout> {
    let mut changed = false;
    let stored = versions
        .change(agent, |rollout: &mut Rollout| {
            let Some(gated) = rollout.gated.as_mut().filter(|g| g.ended.is_none()) else {
                anyhow::bail!(
                    "{agent} has no gated rollout under way (start one with --to V --steps ...)"
                );
            };
            changed = match held {
                Held::Pause if gated.paused.is_none() => {
                    gated.paused = Some(now_ms());
                    true
                }
                Held::Resume if gated.paused.is_some() => {
                    // The step is timed again from now; its sessions still
                    // count from its start.
                    gated.paused = None;
                    gated.resumed = Some(now_ms());
                    true
                }
                _ => false,
            };
            Ok(changed)
        })
        .await?;
    let what = match held {
        Held::Pause => "pause",
        Held::Resume => "resume",
    };
    if !changed {
        println!(
            "{agent}'s gated rollout is already {}",
            if held == Held::Pause {
                "paused"
            } else {
                "running"
            }
        );
        return Ok(stored);
    }
    note(versions, &stored, what, "by a person").await?;
    Ok(stored)
}

/// Records a person's `what` on `rollout`'s gated rollout.
async fn note(versions: &Versions, rollout: &Rollout, what: &str, why: &str) -> anyhow::Result<()> {
    let Some(gated) = &rollout.gated else {
        return Ok(());
    };
    let (jetstream, subjects) = (versions.jetstream(), versions.subjects());
    baton_router::gatekeeper::decisions_stream(jetstream, subjects, 1).await?;
    let at = now_ms();
    // A start is recorded once, whoever records it (a router that finds a
    // rollout a worker's spec started records it too).
    let label = if what == "start" {
        "0/start".to_owned()
    } else {
        format!("{what}/{at}")
    };
    let by = std::env::var("USER").unwrap_or_else(|_| "a person".to_owned());
    let decision = RolloutDecision::of(&rollout.agent, gated, (what, &label), (why, &by, at));
    Ok(baton_router::gatekeeper::record(jetstream, subjects, &decision).await?)
}

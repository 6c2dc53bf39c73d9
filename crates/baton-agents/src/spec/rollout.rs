//! `[rollout]`: a version that rolls itself out, step by step, promoted or
//! rolled back by its sessions' outcomes, once its first worker starts
//! (as `baton rollout TYPE --to V --steps ...` would).

use baton_proto::{GateRule, Gated, Version};
use serde::Deserialize;

/// `[rollout]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRollout {
    steps: Vec<u8>,
    #[serde(default = "ten_minutes")]
    interval: String,
    #[serde(default = "fifty")]
    min_sessions: u32,
    #[serde(default)]
    gates: Vec<String>,
    #[serde(default)]
    escalation_is_not_failure: bool,
}

fn ten_minutes() -> String {
    "10m".to_owned()
}

fn fifty() -> u32 {
    50
}

impl RawRollout {
    /// The gated rollout it asks for, of `version` (which the spec must
    /// name), or what is wrong with it, each naming the fix.
    pub(super) fn plan(&self, version: Option<&str>) -> Result<Gated, Vec<String>> {
        let mut wrong = Vec::new();
        let version = version.and_then(|v| Version::new(v).ok());
        if version.is_none() {
            wrong.push(
                "[rollout] needs the spec's version = \"...\": the version it rolls out".to_owned(),
            );
        }
        if let Some(bad) = Gated::bad_steps(&self.steps) {
            wrong.push(format!("[rollout] steps: {bad}"));
        }
        let interval = Gated::interval_ms(&self.interval);
        if interval.is_none() {
            wrong.push(format!(
                "[rollout] interval {:?} is not a duration: write e.g. \"15s\", \"10m\" or \"1h\"",
                self.interval
            ));
        }
        if self.min_sessions == 0 {
            wrong.push("[rollout] min_sessions must be at least 1".to_owned());
        }
        let texts = if self.gates.is_empty() {
            vec!["success >= -2pt".to_owned()]
        } else {
            self.gates.clone()
        };
        let mut gates = Vec::new();
        for text in &texts {
            match text.parse::<GateRule>() {
                Ok(gate) => gates.push(gate),
                Err(bad) => wrong.push(format!("[rollout] gates: {bad}")),
            }
        }
        match (version, interval) {
            (Some(version), Some(interval)) if wrong.is_empty() => {
                let mut plan = Gated::plan(
                    version,
                    self.steps.clone(),
                    (interval, self.min_sessions),
                    gates,
                );
                plan.escalated_fails = !self.escalation_is_not_failure;
                Ok(plan)
            }
            _ => Err(wrong),
        }
    }
}

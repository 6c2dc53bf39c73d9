//! A gated rollout on the versions page: its step, its gates, and each
//! decision with the numbers it was made on (as `baton versions` shows
//! them; the live reading of the step is there).

use baton_proto::{Rollout, RolloutDecision, Side};
use maud::{Markup, html};

/// How many decisions the page lists (the latest).
const DECISIONS_SHOWN: usize = 20;

/// `rollout`'s gated rollout and `decisions`, or nothing without either.
pub(crate) fn shown(rollout: &Rollout, decisions: &[RolloutDecision]) -> Markup {
    let latest = decisions.len().saturating_sub(DECISIONS_SHOWN);
    let gates = |rollout: &Rollout| {
        (rollout.gated.iter().flat_map(|g| g.gates.iter()))
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    html! {
        @if let Some(gated) = rollout.gated.as_ref().filter(|g| g.ended.is_none()) {
            p.gated data-step=(gated.step) data-paused=(gated.paused.is_some()) {
                "Gated rollout of " b { (rollout.agent) "@" (gated.version) } ": step "
                (gated.step + 1) " of " (gated.steps.len()) " (" (gated.weight()) " %), at least "
                (gated.interval_ms / 1000) " s and " (gated.min_sessions) " of its sessions a step. "
                "The routers promote it or roll it back as these gates say: " code { (gates(rollout)) } "."
                @if gated.paused.is_some() { " Paused: " code { "baton rollout " (rollout.agent) " --resume" } " lets it go on." }
                " The step as it stands: " code { "baton versions " (rollout.agent) } "."
            }
        }
        @if !decisions.is_empty() {
            details.decisions open {
                summary { "Gated rollout decisions, latest last (" (decisions.len()) ")" }
                ol.decisions { @for decision in &decisions[latest..] {
                    li data-what=(decision.what) data-step=(decision.step) data-version=(decision.version) {
                        (baton_gateway::text::utc(decision.at)) " · " b { (decision.what) } " "
                        (decision.agent) "@" (decision.version) " at step " (decision.step + 1)
                        " (" (decision.weight) " % → " (decision.next_weight) " %), by " (decision.by)
                        ": " (decision.why)
                        @if let (Some(base), Some(new)) = (&decision.base, &decision.new) {
                            " · " (side(base)) "; " (side(new))
                        }
                        @for reading in &decision.readings {
                            " · " code { (reading.gate) } " " (reading.verdict)
                            @if let Some(estimate) = reading.estimate { " (" (format!("{estimate:.2}")) ")" }
                        }
                    }
                } }
            }
        }
    }
}

/// One side's sessions, in words.
fn side(side: &Side) -> String {
    format!(
        "{}: {} of {} sessions succeeded",
        side.version, side.succeeded, side.sessions
    )
}

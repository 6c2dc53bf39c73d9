//! Step 5 of the worker loop: the loop guard.
//!
//! Before an envelope goes to target `T`, `T` must not be on the session's
//! path (unless the route declares a bounded cycle with a visit budget), and
//! the path must be shorter than the session's hop budget. A refused route is
//! escalated to the fallback agent with `loop_detected`, or fails the session.

use baton_proto::{AgentName, Envelope};

/// Why handing `next` to `target` would loop, if it would. `max_visits` is
/// the route's visit budget for the target (once when unset).
pub(crate) fn loop_violation(
    next: &Envelope,
    target: &AgentName,
    max_visits: Option<u32>,
) -> Option<String> {
    let path = || {
        next.path
            .iter()
            .map(|hop| hop.agent.as_str())
            .collect::<Vec<_>>()
            .join(" -> ")
    };
    let visits = next
        .path
        .iter()
        .filter(|hop| hop.agent == target.as_str())
        .count();
    match max_visits {
        None if visits > 0 => {
            return Some(format!(
                "{target} already handled this session (path {})",
                path()
            ));
        }
        Some(budget) if visits >= budget as usize => {
            return Some(format!(
                "{target} already had {visits} of its {budget} visits (path {})",
                path()
            ));
        }
        _ => {}
    }
    let budget = next.hop_budget();
    if next.path.len() >= budget as usize {
        return Some(format!("hop budget of {budget} spent (path {})", path()));
    }
    None
}

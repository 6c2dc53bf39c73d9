//! Where work goes: handoffs, routing rules, capability targets, the registry, learned routing, delegation, teams, gates.

pub(crate) mod delegation;
pub(crate) mod elicitation;
pub(crate) mod eval;
pub(crate) mod gated;
pub(crate) mod gates;
pub(crate) mod handoff;
pub(crate) mod learning;
pub(crate) mod registry;
pub(crate) mod retired;
pub(crate) mod rules;
pub(crate) mod targets;
pub(crate) mod teams;
pub(crate) mod version_compat;
pub(crate) mod version_pinning;
pub(crate) mod version_trials;
pub(crate) mod versions;

//! The registry's messages: heartbeats, lookups and their answers, learned routing (outcomes, feedback, notebooks), and each agent type's rollout of versions.

mod messages;
pub use messages::*;
pub(crate) mod gated;
pub(crate) mod learned;
pub(crate) mod outcome;
pub(crate) mod rollout;

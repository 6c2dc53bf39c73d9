//! The registry's messages: heartbeats, lookups and their answers, and learned routing (outcomes, feedback, notebooks).

mod messages;
pub use messages::*;
pub(crate) mod learned;
pub(crate) mod outcome;

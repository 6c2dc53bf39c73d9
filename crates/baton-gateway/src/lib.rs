//! What Baton's gateways share: the web console, the MCP server and the A2A
//! server each expose agent types to callers outside NATS.
//!
//! - [`listen`]: where a gateway may listen and who may call it: loopback
//!   unless told otherwise, and a bearer token required beyond it, compared
//!   by digest;
//! - [`text`]: values and events as people and clients read them;
//! - [`exposed`]: which agent types a gateway offers;
//! - [`budget`](mod@budget): the token budget of a session a caller starts;
//! - [`diff`]: where two sessions part (`baton diff`);
//! - [`turn`]: a conversation's turn read from its events, [`turn::TurnRead`]: what was said in it (its answer, who
//!   gave it, the questions asked of the user);
//! - [`Error`]: why a gateway cannot serve, one type for all three.
//!
//! The human inbox the gateways answer lives with the other services in
//! `baton-worker`, so a gateway needs no agent kind to reach it.

mod budget;
pub mod diff;
mod error;
pub use error::{Error, ErrorKind};
pub mod callers;
pub mod listen;
pub mod text;
pub mod turn;

use baton_proto::{AgentName, Candidate};
pub use budget::budget;

/// The agent types a gateway exposes, sorted: `only`, or when it is empty
/// every one among the registry's `candidates`.
#[must_use]
pub fn exposed(only: &[AgentName], candidates: &[Candidate]) -> Vec<String> {
    let mut names: Vec<String> = if only.is_empty() {
        candidates.iter().map(|c| c.agent.to_string()).collect()
    } else {
        only.iter().map(ToString::to_string).collect()
    };
    names.sort();
    names.dedup();
    names
}

//! Baton's router: the process beside the workers.
//!
//! [`Router`] ([`RouterConfig`]) runs:
//!
//! - `router`: moves tasks from `baton.ingress` to their first agent
//!   (and `router/route`: one task's route);
//! - `deadlines`: one timer message per session with a deadline, and what
//!   ends the session when it fires;
//! - `sessions`: the session service, for clients that may not read the
//!   streams (reads and cancels of one session);
//! - `gatekeeper`: judges gated rollouts from their sessions' outcomes,
//!   and promotes or rolls them back;
//! - `keeper`: the conversations' keeper, which closes turns that ended,
//!   starts the messages queued behind them and removes idle
//!   conversations, through the conversations' one entry point in
//!   `baton-client`.
//!
//! It stands on the client (`baton-client`) and the plumbing
//! (`baton-nats`), and never on the worker loop (`baton-worker`).
//! [`footprint`] says what it does on NATS.

mod deadlines;
pub mod gatekeeper;
mod keeper;
mod router;
mod sessions;

pub use router::{Router, RouterConfig, footprint};

//! The worker loop: intake → plan → run → publish, then settle.
//!
//! [`start`] starts a [`Worker`](crate::Worker) and feeds its messages to
//! [`handle`], which reads top-down as the loop, in the order of "How a
//! worker handles a message" (docs/internals/worker-loop.md). Its steps:
//!
//! - [`intake`]: pulls messages with bounded concurrency, drains on shutdown;
//! - [`delivery`]: one message: its attempt, trace context and encoding;
//! - [`plan`]: what to publish and how to settle, as pure functions
//!   (refusals, outcomes, failures, delegations); [`guard`] refuses loops;
//! - [`run`]: the agent under its timeout and the session's deadline, with
//!   progress acks;
//! - [`join`]: delegations, a pure state machine and its store;
//! - [`outbox`]: the one place a hop's outputs are published and its message
//!   settled, and where the event level is applied;
//! - [`runtime`]: what every message shares;
//! - [`config`], [`metrics`], [`registry`] (heartbeats and lookups),
//!   [`reporter`] (what a running hop reports), [`cancel`] (cancelled
//!   sessions), [`advisory`] (the net for messages no worker settles).

pub(crate) mod advisory;
pub(crate) mod cancel;
pub(crate) mod config;
pub(crate) mod delivery;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod intake;
pub(crate) mod join;
pub(crate) mod metrics;
pub(crate) mod outbox;
pub(crate) mod plan;
pub(crate) mod registry;
pub(crate) mod reporter;
pub(crate) mod run;
pub(crate) mod runtime;
pub(crate) mod start;

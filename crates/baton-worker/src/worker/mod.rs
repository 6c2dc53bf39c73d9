//! The worker loop: intake → plan → run → publish, then settle.
//!
//! [`start`] starts a [`Worker`](crate::Worker) and feeds its messages to
//! [`handle`], which reads top-down as the loop, in the order of "How a
//! worker handles a message" (docs/internals/worker-loop.md). Its steps:
//!
//! - the message pipeline it shares with the other processes (intake, delivery,
//!   a plan's outputs, settling, lookups, cancels): [`crate::pipeline`];
//! - [`decide`]: what to publish and how to settle, as pure functions
//!   (refusals, outcomes, failures, delegations); [`guard`] refuses loops;
//! - [`run`]: the agent under its timeout and the session's deadline, with
//!   progress acks;
//! - [`join`]: delegations, a pure state machine and its store;
//! - [`outbox`]: the one place a hop's outputs are published and its message
//!   settled, and where the event level is applied;
//! - [`runtime`]: what every message shares;
//! - [`config`], [`metrics`], [`heartbeats`] (to the registry),
//!   [`reporter`] (what a running hop reports);
//! - [`moved`]: a versioned worker moves tasks on its type's own subject to
//!   their versions.

pub(crate) mod config;
pub(crate) mod decide;
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod heartbeats;
pub(crate) mod join;
pub(crate) mod metrics;
pub(crate) mod moved;
pub(crate) mod outbox;
pub(crate) mod reporter;
pub(crate) mod run;
pub(crate) mod runtime;
pub(crate) mod start;

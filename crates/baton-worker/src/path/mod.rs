//! The message path: what the worker loop and the other processes (the
//! router, the deadline watch) both do with a message, so that neither
//! reaches into the other.
//!
//! - [`intake`]: pulls messages with bounded concurrency, drains on shutdown;
//! - [`delivery`]: one message: its attempt, trace context and encoding;
//! - [`plan`]: a plan's outputs (envelopes, events, dead letters) and how
//!   the delivery is settled;
//! - [`settle`]: publishing a plan's outputs, then settling the delivery;
//! - [`registry`]: best-agent lookups, with a memory for outages;
//! - [`cancel`]: cancelled sessions, watched into memory;
//! - [`advisory`]: the net for messages no worker settles.

pub(crate) mod advisory;
pub(crate) mod cancel;
pub(crate) mod delivery;
pub(crate) mod intake;
pub(crate) mod plan;
pub(crate) mod registry;
pub(crate) mod settle;

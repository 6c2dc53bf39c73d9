//! The message pipeline: what the worker loop and the other processes (the
//! router, the deadline watch) both do with a message, so that neither
//! reaches into the other.
//!
//! - [`intake`]: pulls messages with bounded concurrency, drains on shutdown;
//! - [`delivery`]: one message: its attempt, trace context and encoding;
//! - [`opening`]: a root task's ended-session check, riding on its first
//!   write;
//! - [`plan`]: a plan's outputs (envelopes, events, dead letters) and how
//!   the delivery is settled;
//! - [`settle`]: publishing a plan's outputs, then settling the delivery;
//! - [`cancel`]: cancelled sessions, watched into memory;
//! - [`defaults`]: the router's defaults for tasks (deadline, budget), and
//!   how a sender past the router learns them;
//! - [`timer`]: a session's deadline timer, sent beside its task;
//! - [`versions`]: which subject a task goes to: an agent type's one
//!   subject, or the version the session is pinned to;
//! - [`address`]: the one seam that addresses a message to an agent type:
//!   its id, the router's defaults, its version, its subject and its
//!   deadline watch, as how it is sent decides;
//! - [`advisory`]: the net for messages no worker settles.

pub mod address;
pub mod advisory;
pub mod cancel;
pub mod defaults;
pub mod delivery;
pub mod intake;
pub mod opening;
pub mod plan;
pub mod settle;
pub mod timer;
pub mod versions;

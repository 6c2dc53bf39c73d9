//! The processes beside the workers.
//!
//! - [`router`]: moves tasks from `baton.ingress` to their first agent, runs
//!   the deadline watch, the session service and the conversations' keeper;
//! - [`deadlines`]: one timer message per session with a deadline, and what
//!   ends the session when it fires;
//! - [`sessions`]: the router's session service, for clients that may not
//!   read the streams (reads and cancels of one session).

pub(crate) mod deadlines;
pub(crate) mod router;
pub(crate) mod sessions;

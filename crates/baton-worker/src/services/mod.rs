//! The processes beside the workers, and the client that talks to them.
//!
//! - [`router`]: moves tasks from `baton.ingress` to their first agent, runs
//!   the deadline watch and the session service;
//! - [`deadlines`]: one timer message per session with a deadline, and what
//!   ends the session when it fires;
//! - [`sessions`]: the router's session service, for clients that may not
//!   read the streams (reads and cancels of one session);
//! - [`client`]: submitting tasks, following and cancelling sessions;
//!   [`reading`] is how a client reads through the router;
//! - [`deadletters`]: listing and replaying dead letters;
//! - [`inbox`]: tasks that wait for a person, and their answers.

pub(crate) mod client;
pub(crate) mod deadletters;
pub(crate) mod deadlines;
pub(crate) mod inbox;
pub(crate) mod reading;
pub(crate) mod relaying;
pub(crate) mod router;
pub(crate) mod sessions;

//! What talks to a deployment from outside the worker loop: the clients
//! that gateways, the CLI, the router and the workers all use.
//!
//! - [`client`]: submitting tasks, following, reading and cancelling
//!   sessions (directly, or through the router's session service);
//! - [`inbox`]: tasks that wait for a person, and their answers;
//! - [`registry`]: best-agent lookups, with a memory for outages;
//! - [`deadletters`]: listing and replaying dead letters.

pub(crate) mod client;
pub(crate) mod deadletters;
pub(crate) mod inbox;
pub(crate) mod registry;

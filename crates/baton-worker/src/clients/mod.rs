//! What talks to a deployment from outside the worker loop: the clients
//! that gateways, the CLI, the router and the workers all use.
//!
//! - [`client`]: submitting tasks, following, reading and cancelling
//!   sessions (directly, or through the router's session service);
//! - [`inbox`]: tasks that wait for a person, and their answers;
//! - [`registry`]: best-agent lookups, with a memory for outages;
//! - [`deadletters`]: listing and replaying dead letters;
//! - [`versions`]: the versions of agent types, as operators see and
//!   change them;
//! - [`conversations`]: the conversations' one entry point (a user's
//!   message to a conversation, and what became of it) and the router's
//!   keeper, over the records of `state/conversation`.

pub(crate) mod client;
pub(crate) mod conversations;
pub(crate) mod deadletters;
pub(crate) mod inbox;
pub(crate) mod registry;
pub(crate) mod versions;

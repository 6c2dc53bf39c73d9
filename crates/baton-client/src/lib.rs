//! What talks to a Baton deployment from outside the worker loop: the
//! clients that the gateways, the CLI, the router and the workers all use.
//! A gateway needs this crate and the plumbing under it (`baton-nats`),
//! never the worker loop.
//!
//! - [`Client`]: submits tasks, follows, reads and cancels sessions
//!   (directly, or through the router's session service), and replays
//!   them ([`SessionReplay`]); dead letters ([`DeadLetterEntry`]);
//! - [`Inbox`]: tasks that wait for a person, and their answers;
//! - [`RegistryClient`]: best-agent lookups, with a memory for outages;
//! - [`conversation`]: the conversations' one entry point
//!   ([`conversation::Conversations::say`]: a user's message to a
//!   conversation, and what became of it), over the records of
//!   `baton-nats`;
//! - [`versions`]: the versions of agent types, as operators see and
//!   change them; [`eval`]: a version tried on recorded sessions.
//!
//! [`footprints`] says what each of them does on NATS, declared beside the
//! code that does it.

mod client;
mod conversations;
mod deadletters;
pub mod eval;
mod inbox;
mod registry;
pub mod versions;

pub use baton_nats::{Error, ErrorKind};
pub use client::replay::{SessionReplay, ending};
pub use client::{Cancel, Client, EventStream, Seen};
pub use deadletters::{DeadLetterEntry, ReplayOptions};
pub use inbox::{Decision, Inbox, InboxEntry, Reply};
pub use registry::RegistryClient;

/// Conversations: many turns, one memory, one turn at a time. The one entry
/// point is [`conversation::Conversations::say`]; the records and their
/// errors are `baton-nats`'s, and the keeper that closes turns as they
/// end is the router's.
pub mod conversation {
    pub use crate::conversations::{Conversations, Question, Taken, Turn, UserMessage};
    pub use baton_nats::state::conversation::INTERRUPTED;
}

/// What each client does on NATS, declared next to the code that does it;
/// `baton permissions` and `baton doctor` derive from these.
pub mod footprints {
    pub use crate::client::follow::footprint as session_reader;
    pub use crate::client::footprint as client;
    pub use crate::deadletters::footprint as dead_letters;
    pub use crate::inbox::footprint as inbox;
}

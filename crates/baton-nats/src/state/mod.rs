//! Session-level state: what Baton remembers between messages, in
//! JetStream key-value buckets, and the one place each bucket is opened.
//!
//! - [`buckets`]: every bucket of a deployment and its configuration
//!   ([`Bucket`]): conversations, transcripts, the inbox, cancelled
//!   sessions, joins, followers, hop journals, rate limits, the A2A index;
//! - [`conversation`]: a conversation's record: its holder, turns, queue
//!   and lifecycle, read and swapped with compare-and-swap (the one entry
//!   point that says a message to a conversation is `baton-client`'s, and
//!   the keeper `baton-router`'s: this room names nothing above it);
//! - [`transcript`]: a conversation's transcript, an entry per turn;
//! - [`followers`]: who follows live events, watched by every worker;
//! - [`rollouts`]: each agent type's rollout of versions, followed by
//!   every process that sends work;
//! - [`session`]: a session read from its events: its last event, its
//!   path made whole.
//!
//! The delegations' joins (`baton-worker`'s `join/store.rs`), the
//! cancelled sessions (`pipeline/cancel.rs`) and the inbox (`baton-client`'s
//! `inbox.rs`) keep their logic beside the code that uses them, and open
//! their buckets here.

pub mod buckets;
#[doc(hidden)]
pub mod conversation;
#[doc(hidden)]
pub mod followers;
pub mod rollouts;
#[doc(hidden)]
pub mod session;
pub mod transcript;

pub use buckets::Bucket;

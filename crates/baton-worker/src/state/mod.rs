//! Session-level state: what Baton remembers between messages, in
//! JetStream key-value buckets, and the one place each bucket is opened.
//!
//! - [`buckets`]: every bucket of a deployment and its configuration
//!   ([`Bucket`]): conversations, transcripts, the inbox, cancelled
//!   sessions, joins, followers, hop journals, rate limits, the A2A index;
//! - [`conversation`]: a conversation's record: its holder, turns, queue
//!   and lifecycle, and the router's keeper;
//! - [`transcript`]: a conversation's transcript, an entry per turn;
//! - [`followers`]: who follows live events, watched by every worker;
//! - [`rollouts`]: each agent type's rollout of versions, followed by
//!   every process that sends work.
//!
//! The delegations' joins (`worker/join/store.rs`), the cancelled sessions
//! (`pipeline/cancel.rs`) and the inbox (`clients/inbox.rs`) keep their
//! logic beside the code that uses them, and open their buckets here.

pub mod buckets;
pub mod conversation;
pub(crate) mod followers;
pub mod rollouts;
pub mod transcript;

pub use buckets::Bucket;

//! Baton's plumbing on NATS JetStream: what every Baton process stands on,
//! below the client (`baton-client`), the worker loop (`baton-worker`)
//! and the router (`baton-router`). Nothing here knows of agents or of what
//! they decide.
//!
//! The crate has three rooms, each naming only the rooms below it (a house
//! test checks it); each `mod.rs` is its table of contents. From the
//! bottom:
//!
//! - `nats`: plumbing: [`Connection`] (a NATS client that learns its publish
//!   rights), stream provisioning ([`StreamSettings`], [`key_value`]),
//!   durable publishing, the claim-check ([`ClaimCheck`]), which agent types
//!   are served ([`is_served`]), a key-value bucket followed into memory
//!   ([`watched`]);
//! - [`state`]: what is remembered between messages: every key-value bucket
//!   of a deployment, configured and opened in one place
//!   ([`state::Bucket`]); the conversations' records and their transcripts
//!   ([`transcript`]); who follows live events ([`live`]); the rollouts of
//!   versions;
//! - `pipeline`: what the worker loop and the router both do with a
//!   message: pulling with bounded concurrency, a delivery's attempt and
//!   encoding ([`SettleMode`]), a plan's outputs, publishing them and then
//!   settling, cancelled sessions ([`cancelled_event`]), deadline timers,
//!   which subject a task goes to.
//!
//! Beside them: the runtime's [`Error`], whether this process serves
//! ([`health`], read by the probes of `baton-telemetry`), and where every
//! instrument comes from ([`meter`]).
//!
//! The `nats` and `pipeline` rooms, and some of `state`, are public for
//! the crates above and hidden from the documentation: they are machinery,
//! not an API.
//!
//! [`footprints`] says what this crate's parts do on NATS, declared beside
//! the code that does it.

mod error;
pub mod health;
pub mod meter;
#[doc(hidden)]
pub mod nats;
#[doc(hidden)]
pub mod pipeline;
pub mod state;

pub use error::{Error, ErrorKind, error_chain};
pub use nats::claimcheck::{ClaimCheck, ClaimSettings};
pub use nats::connection::Connection;
pub use nats::provision::{StreamSettings, key_value, redelivery_span};
pub use nats::served::{is_served, is_version_served};
pub use pipeline::cancel::{cancel_event_id, cancelled_event};
pub use pipeline::delivery::SettleMode;
pub use state::transcript;

/// Following live events: a follower says it listens, so that workers at
/// the `lean` event level publish the events they do not store.
pub mod live {
    pub use crate::state::followers::{Following, Scope, follow};
}

/// A key-value bucket followed into memory, reopened whenever its watch
/// ends: for state every process reads on its hot path.
pub mod watched {
    pub use crate::nats::watched::{Seen, watch};
}

/// What the parts of this crate do on NATS, declared next to the code that
/// does it; `baton permissions` and `baton doctor` derive from these.
pub mod footprints {
    pub use crate::nats::claimcheck::footprint as claims;
    pub use crate::nats::provision::footprint as streams;
    pub use crate::nats::served::footprint as served;
    pub use crate::pipeline::cancel::footprint as cancels;
    pub use crate::state::conversation::deleting_footprint as deleting_conversations;
    pub use crate::state::conversation::footprint as conversations;
    pub use crate::state::followers::follower_footprint as live_follower;
    pub use crate::state::rollouts::footprint as rollouts;
}

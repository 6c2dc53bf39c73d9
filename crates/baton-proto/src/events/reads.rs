//! Reading one session through the router: the requests a client that may
//! not read the events stream itself sends on `baton.session.read.<session>`
//! and `baton.session.cancel.<session>`, and their answers.
//!
//! JetStream's read calls take a subject filter that may be a wildcard, and
//! NATS permissions cannot tell a wildcard from a session id. So a client
//! whose reads must stay within the sessions it knows gets no JetStream read
//! rights at all; the router reads for it, one session per request.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Event, Map};

/// The longest a read may wait for new events, in ms (longer waits are cut to it).
pub const MAX_READ_WAIT_MS: u64 = 30_000;

/// A request for a session's events, on `baton.session.read.<session>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "ReadRequest")]
pub struct ReadRequest {
    /// Only events stored after this stream sequence (0: from the start).
    #[serde(default)]
    pub after: u64,
    /// When nothing is stored after `after`, how long to wait for the next
    /// event (stored or live), in ms; at most 30,000. 0 answers at once.
    #[serde(default)]
    pub wait_ms: u64,
    /// A byte offset into the first event after `after`: set when that
    /// event came as a [`ReadReply::part`] and the next part is wanted.
    #[serde(default)]
    pub offset: u64,
    /// Extension (optional): instead of a read, relay the session's live
    /// events (those not stored) to the reply subject, each in a reply of
    /// its own, for this many ms (at most 30,000). The first reply, sent
    /// once the relay listens, and the last one (`live_end`) carry no event.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub live_ms: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The answer to a [`ReadRequest`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "ReadReply")]
pub struct ReadReply {
    /// Events in stream order, claim-checked parts restored.
    #[serde(default)]
    pub events: Vec<ReadEvent>,
    /// The next event, when it is too large for one reply: one part of its
    /// encoding. `events` is then empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<EventPart>,
    /// Why the read failed (the session's events could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Extension (optional): a reply of a live relay (`live_ms`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live: bool,
    /// Extension (optional): the relay's last reply; it has ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live_end: bool,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// One event of a [`ReadReply`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReadEvent {
    /// Its sequence in the events stream; 0 for a live event that is not
    /// stored (progress at the `lean` event level).
    pub seq: u64,
    /// Whether more of the session's events are stored after it.
    #[serde(default)]
    pub more: bool,
    /// The event.
    pub event: Event,
}

/// A part of one event's MessagePack encoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventPart {
    /// The event's sequence in the events stream.
    pub seq: u64,
    /// Whether more of the session's events are stored after it.
    #[serde(default)]
    pub more: bool,
    /// Where these bytes start in the encoding.
    pub offset: u64,
    /// The encoding's whole length.
    pub total: u64,
    /// The bytes (MessagePack bin).
    #[serde(with = "serde_bytes")]
    #[schemars(with = "Vec<u8>")]
    pub bytes: Vec<u8>,
}

/// A request to cancel a session, on `baton.session.cancel.<session>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "CancelRequest")]
pub struct CancelRequest {
    /// Why, for people: the `detail` of the `failed` event.
    #[serde(default)]
    pub detail: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The answer to a [`CancelRequest`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "CancelReply")]
pub struct CancelReply {
    /// The session's terminal event: the cancel's `failed` event, or the
    /// end it had already (`ended_before`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<Event>,
    /// Whether the session had ended before the cancel.
    #[serde(default)]
    pub ended_before: bool,
    /// Why the cancel failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

//! The Baton wire protocol, version 1: the types every Baton process exchanges.
//!
//! This crate is runtime-free (no tokio, no NATS) so any tool can link it.
//! Its folders hold one idea each; every type is re-exported here, at the
//! root, and the crate's own code names the modules by their short names:
//!
//! - `wire/`: the msgpack codec ([`Wire`]): named maps on the way out, a size
//!   limit and classified errors ([`Error`], by [`ErrorKind`]) on the way in, unknown fields kept
//!   in `extra`; values and maps; the JSON Schemas of every payload
//!   ([`schemas`]); uuids as text, hex, time, nesting limits; deterministic
//!   derived ids ([`derive_id`]) that make redelivery idempotent; and the
//!   lowercase string enums that read unknown values as `Other` ([`Kind`],
//!   [`EventType`], [`Reason`], [`Role`], [`ResultStatus`],
//!   [`DeadLetterReason`]);
//! - `envelope` (a file and its folder): the payload of `PROTOCOL.md`,
//!   [`Envelope`] with [`Context`], [`Message`], [`Step`], [`Parent`],
//!   [`Hop`], [`Reason`], [`Usage`] and [`Budget`], gates, replays, a
//!   session's [`Start`], forwarding without a full decode ([`Head`],
//!   [`Rewrite`]), and what an exec agent's program reads and prints
//!   ([`ExecRequest`], [`ExecReply`]);
//! - `events/`: what a session records ([`Event`]), live answer pieces
//!   ([`Delta`]), reading a session through the router ([`ReadRequest`]),
//!   deadline timers;
//! - `nats/`: subject and stream names ([`Subjects`]) and validated
//!   [`AgentName`]s, headers, the claim-check ([`check_out`], [`restore`]:
//!   large parts of a payload kept in an object store, referenced by content
//!   hash, [`Claim`]), and [`footprint`]s;
//! - `registry/`: [`Heartbeat`], [`LookupRequest`] and [`LookupResponse`],
//!   and learned routing ([`Outcome`], [`Learned`]);
//! - `conversation/`: the record of a conversation ([`Conversation`]), what an
//!   envelope carries of it ([`TurnOf`], [`History`]), and its
//!   [`transcript`].
//!
//! # Examples
//!
//! ```
//! use baton_proto::{Envelope, Wire};
//!
//! let task = Envelope::task("Where is my order ABC-123?");
//! let bytes = task.to_msgpack().unwrap();
//! let back = Envelope::from_msgpack(&bytes).unwrap();
//! assert_eq!(back.context.initial_query, "Where is my order ABC-123?");
//! ```
#![warn(missing_docs)]

#[macro_use]
mod wire;
mod conversation;
mod envelope;
mod events;
mod nats;
mod registry;

// The modules by their short names, for the crate's own paths.
use conversation::{conversation_ref, conversation_turn};
use envelope::{exec, gate, hop, reason, replay, start, usage};
use events::{delta, event, folding, reads, refs, timer};
use nats::{claim, header, name, subject};
use registry::{learned, outcome};
use wire::{codec, error_type, id, nesting, schema, text, time, uuid_text, value};

pub use conversation::transcript;
pub use nats::footprint;

pub use claim::{CLAIMS_FIELD, CheckedOut, Claim, check_out, claims, object_name, restore};
pub use codec::{DEFAULT_MAX_PAYLOAD, Wire};
pub use conversation::{Conversation, Overlap, TurnMessage, VersionMove};
pub use conversation_ref::{Base, Compaction, History, TurnOf};
pub use conversation_turn::{ConversationTurn, TextAt};
pub use delta::{Delta, Shown};
pub use envelope::{
    Context, DEFAULT_MAX_HOPS, Envelope, Expanded, Head, Kind, Map, Message, Parent, Reason,
    ResultStatus, Rewrite, Role, Step, Value,
};
pub use error_type::error_chain;
pub use event::{Event, EventType, Folded};
pub use exec::{
    ExecAction, ExecCall, ExecCallError, ExecCallResult, ExecChild, ExecMessage, ExecOp, ExecReply,
    ExecRequest, ExecResponse, ExecStep,
};
pub use folding::{FoldedStart, FoldedStep};
pub use footprint::Footprint;
pub use gate::{Authorize, Gate, JournalEntry, Resumed};
pub use header::{DeadLetterReason, headers};
pub use hop::Hop;
pub use id::{derive_id, derive_id_labelled};
pub use learned::{
    Collaborator, FeedbackReply, FeedbackRequest, Learned, Notebook, NotebookRequest, Similar, Why,
};
pub use name::{AgentName, Version};
pub use nesting::{MAX_NESTING, nests_deeper_than};
pub use outcome::{
    MAX_FEATURES, Outcome, OutcomeHop, OutcomeKind, features, session_succeeded, similarity,
    succeeded,
};
pub use reads::{
    CancelReply, CancelRequest, EventPart, MAX_READ_WAIT_MS, ReadEvent, ReadReply, ReadRequest,
};
pub use refs::Ref;
pub use registry::gated::{GateRule, Gated, Metric, Reading, RolloutDecision, Side};
pub use registry::rollout::{
    Change as RolloutChange, HISTORY_KEPT as ROLLOUT_HISTORY_KEPT, Ramp, Role as VersionRole,
    Rollout,
};
pub use registry::{Candidate, Heartbeat, LookupRequest, LookupResponse};
pub use replay::Replay;
pub use schema::schemas;
pub use start::Start;
pub use subject::Subjects;
pub use text::{hex, token_safe};
pub use time::{MAX_DEADLINE_AHEAD_MS, deadline_out_of_range, now_ms};
pub use timer::{DeadlineTimer, deadline_event_id};
pub use transcript::TranscriptEntry;
pub use usage::{Budget, Usage, amount, micros};
pub use wire::error::{Error, ErrorKind};

/// The protocol major version this crate reads and writes (`v`).
pub const PROTOCOL_VERSION: u64 = 1;

/// The `v` of an event that keeps a text once (`refs`) or names only the
/// hops it adds (`path_from`): a reader of version 1 would misread it (an
/// absent answer, a one-hop path), so it refuses it as
/// `unsupported_version` instead. Every other event, and every other
/// payload, is version 1.
pub const EVENT_VERSION_REFERRING: u64 = 2;

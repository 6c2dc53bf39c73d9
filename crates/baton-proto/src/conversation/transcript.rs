//! A conversation's transcript (an optional extension): a log of entries,
//! one per closed turn, each holding the messages that turn added. A
//! turn's envelope carries a [`History`], a reference to the log up to the
//! turn, and only its own messages; a worker puts the referenced messages
//! back before its agent runs, and takes them off again before it
//! publishes. So a turn's messages and events stay the same size however
//! long the conversation grows, and its transcript is stored once.
//!
//! Entries are chained: the head after entry `n` is the SHA-256 of the head
//! before it and the entry's bytes, in hex. A reader checks the chain, and
//! the same transcript has the same head in every conversation (a fork's
//! first turns too).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::conversation_ref::{History, chain, empty_head};
use crate::envelope::Message;
use crate::value::Map;

/// One entry of a transcript: what turn `turn` added, stored under
/// [`crate::Conversation::entry_key`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TranscriptEntry {
    /// The turn that closed it.
    pub turn: u32,
    /// The entry holds the whole transcript, not what the turn added: the
    /// turn ended with a context that does not refer to the entries before
    /// (its agent rewrote the conversation). Readers start again from it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub base: bool,
    /// The messages, in order.
    pub messages: Vec<Message>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl TranscriptEntry {
    /// Turns `messages`, the transcript before the entry, into the
    /// transcript after it.
    pub fn apply_to(self, messages: &mut Vec<Message>) {
        if self.base {
            messages.clear();
        }
        messages.extend(self.messages);
    }

    /// How many messages the transcript holds after the entry, when it held
    /// `before` messages before it.
    #[must_use]
    pub fn count_after(&self, before: u32) -> u32 {
        let added = u32::try_from(self.messages.len()).unwrap_or(u32::MAX);
        if self.base {
            added
        } else {
            before.saturating_add(added)
        }
    }

    /// The entry's bytes as stored: its msgpack encoding, with field names.
    ///
    /// # Errors
    ///
    /// When a message cannot be encoded.
    pub fn to_bytes(&self) -> Result<Vec<u8>, rmp_serde::encode::Error> {
        rmp_serde::to_vec_named(self)
    }
}

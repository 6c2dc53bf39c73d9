//! A conversation's ended turn as listed beside its record (an optional
//! extension, with conversations): what `baton conversations show` reads.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::uuid_text;
use crate::value::Map;

/// One turn of a conversation that ended: listed beside the record (key
/// [`crate::Conversation::turn_key`]) when the turn is closed, so the turns can be
/// listed in order with their sessions and the agents that took them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversationTurn {
    /// The turn, from 1.
    pub turn: u32,
    /// The session it ran as.
    #[serde(with = "uuid_text")]
    pub session: Uuid,
    /// The user's message; empty when [`ConversationTurn::text_at`] says
    /// where the transcript keeps it.
    pub text: String,
    /// Where the transcript keeps the user's message, when it does (an
    /// optional extension): `text` is then empty, so the text is stored
    /// once. Readers put it back ([`ConversationTurn::text_at`] names the
    /// entry and the message); a reader without the extension sees an
    /// empty text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_at: Option<TextAt>,
    /// The agent types of its hops, in order: the first took the turn, the
    /// last answered it (and then held the conversation, unless it was
    /// handed back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<crate::AgentName>,
    /// How it ended: its terminal event's kind.
    pub ended: crate::EventType,
    /// Why, when it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::Reason>,
    /// When its message arrived, unix ms.
    pub at: u64,
    /// When it ended, unix ms.
    pub ended_at: u64,
    /// Who held the conversation once it ended (absent: nobody, or listed
    /// by an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<crate::AgentName>,
    /// How many entries the conversation's transcript had once it ended
    /// (absent: listed by an older version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u32>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map,
}

/// A message of a conversation's transcript: message `message` (from 0)
/// of entry `entry` (from 1, key [`crate::Conversation::entry_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextAt {
    /// The entry, from 1.
    pub entry: u32,
    /// The message within the entry, from 0.
    pub message: u32,
}

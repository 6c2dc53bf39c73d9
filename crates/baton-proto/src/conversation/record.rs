//! Conversations (an optional extension): many turns, one memory. A turn is
//! a session, as every task is; its envelopes carry [`TurnOf`], and the
//! conversation's durable record ([`Conversation`]) says who holds it, which
//! turn runs, what waits, and where the transcript is. Every change to the
//! record is a compare-and-swap on its revision.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

#[cfg(doc)]
use crate::conversation_ref::TurnOf;
use crate::uuid_text;
use crate::value::Map;

/// A user message of a conversation: the turn it starts, as it waits or runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnMessage {
    /// The session the turn runs as (chosen when the message arrived, so
    /// its caller can follow it at once, queued or not).
    #[serde(with = "uuid_text")]
    pub session: Uuid,
    /// The message's text.
    pub text: String,
    /// Shared variables the message sets.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub variables: Map,
    /// When it arrived, unix ms.
    pub at: u64,
    /// The agent type the caller addressed: the turn goes there when
    /// nobody holds the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<crate::AgentName>,
    /// The caller follows the turn live and asks for answers as they are
    /// written (the envelope's `stream`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// The turn's budget, when the caller set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::Budget>,
    /// Messages this one interrupted (the cancelled turn's, and those that
    /// waited behind it), oldest first: the turn runs with them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<String>,
    /// The running turn's task was published (JetStream acknowledged it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sent: bool,
    /// A newer message interrupts the running turn: when it ends without
    /// an answer, its messages run with the next turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Interrupted turns whose tool calls this turn records (each call with
    /// its result, or an "interrupted" one), after `earlier`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<u32>,
}

impl TurnMessage {
    /// A message with `text`, to run as a new session, arrived now.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            session: Uuid::new_v4(),
            text: text.into(),
            variables: Map::new(),
            at: crate::now_ms(),
            to: None,
            stream: false,
            budget: None,
            earlier: Vec::new(),
            sent: false,
            interrupted: false,
            cut: Vec::new(),
        }
    }
}

/// A conversation's record, in the key-value bucket `BATON_CONVERSATIONS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Its id.
    pub id: String,
    /// Who started it (a caller's name); only they continue and read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Where a turn starts when nobody holds the conversation: an agent
    /// type, or absent for the router's default entry agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<crate::AgentName>,
    /// The agent type that holds it: the next turn goes there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<crate::AgentName>,
    /// Turns started so far.
    pub turns: u32,
    /// The turn that runs now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<TurnMessage>,
    /// Messages that wait for the running turn to end, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<TurnMessage>,
    /// Messages of interrupted turns that ended without an answer, oldest
    /// first: the next turn to start runs with them before its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<String>,
    /// Interrupted turns that ended without an answer, oldest first: the
    /// next turn to start records their tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cut: Vec<u32>,
    /// The transcript so far: the session of the last turn that ended with
    /// a context (its terminal event's `context`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "uuid_text::option"
    )]
    pub transcript: Option<Uuid>,
    /// The transcript so far, as its log's entries (each turn's messages,
    /// stored once): the next turn's context refers to it. Absent in a
    /// record written before the log: `transcript` is read instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<crate::History>,
    /// What the next turn's context starts from besides its messages: the
    /// last turn's shared variables, state and metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Box<crate::Context>>,
    /// Extension: the versions its turns were pinned to, by agent type (as
    /// the last turn ended): the next turn goes to the same versions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub versions: std::collections::BTreeMap<crate::AgentName, crate::Version>,
    /// Extension: the times a turn moved the conversation to another
    /// version of an agent type (its old version was retired with
    /// `--upgrade-conversations`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<VersionMove>,
    /// Unix ms.
    pub created_at: u64,
    /// Unix ms.
    pub updated_at: u64,
}

/// A conversation's move to another version of an agent type, at a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionMove {
    /// The turn that ran on the new version.
    pub turn: u32,
    /// The agent type.
    pub agent: crate::AgentName,
    /// The version it left.
    pub from: crate::Version,
    /// The version it went to.
    pub to: crate::Version,
}

impl Conversation {
    /// A new conversation `id` of `owner`, entered at `entry`.
    #[must_use]
    pub fn new(
        id: impl Into<String>,
        owner: Option<String>,
        entry: Option<crate::AgentName>,
    ) -> Self {
        let now = crate::now_ms();
        Self {
            id: id.into(),
            owner,
            entry,
            holder: None,
            turns: 0,
            running: None,
            queue: Vec::new(),
            carried: Vec::new(),
            cut: Vec::new(),
            transcript: None,
            history: None,
            context: None,
            versions: std::collections::BTreeMap::new(),
            moves: Vec::new(),
            created_at: now,
            updated_at: now,
        }
    }

    /// The key of conversation `id` in the bucket: `c.` and the first 16
    /// bytes, in hex, of the SHA-256 of the id (an id may hold any text).
    #[must_use]
    pub fn key_of(id: &str) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(id.as_bytes());
        format!("c.{}", crate::hex(&digest[..16]))
    }

    /// The key of turn `turn` of conversation `id` in the bucket
    /// ([`crate::ConversationTurn`]): `t.`, the same hex as [`Conversation::key_of`],
    /// and the turn.
    #[must_use]
    pub fn turn_key(id: &str, turn: u32) -> String {
        let key = Self::key_of(id);
        format!("t.{}.{turn}", key.trim_start_matches("c."))
    }

    /// The key of entry `entry` (from 1) of conversation `id`'s transcript
    /// ([`crate::TranscriptEntry`]) in the transcripts bucket: the same hex
    /// as [`Conversation::key_of`], and the entry.
    #[must_use]
    pub fn entry_key(id: &str, entry: u32) -> String {
        let key = Self::key_of(id);
        format!("{}.{entry}", key.trim_start_matches("c."))
    }

    /// The id of the task that starts turn `turn`: every starter (a
    /// gateway, or the router's keeper) sends it under this id, so it is
    /// sent once. It is derived from the conversation's id and when it was
    /// created, so an id used again, after its conversation expired or was
    /// deleted, starts tasks of its own.
    #[must_use]
    pub fn task_id(&self, turn: u32) -> Uuid {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(format!("{}\n{}", self.id, self.created_at));
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&digest[..16]);
        crate::derive_id_labelled(Uuid::from_bytes(seed), "turn", turn)
    }
}

/// What becomes of a message that arrives while a turn runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// It runs next, in arrival order, and sees the answer before it.
    #[default]
    Enqueue,
    /// It is refused with an error that names the running turn.
    Reject,
    /// The running turn is cancelled; the new turn runs with both messages.
    Interrupt,
}

impl Overlap {
    /// The policy named `name`, if it is one.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "enqueue" => Some(Self::Enqueue),
            "reject" => Some(Self::Reject),
            "interrupt" => Some(Self::Interrupt),
            _ => None,
        }
    }
}

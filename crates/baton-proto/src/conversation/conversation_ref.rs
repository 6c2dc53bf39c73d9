//! What an envelope carries of the conversation it belongs to (an optional
//! extension): which turn it is ([`TurnOf`]), which transcript comes
//! before its context's messages ([`History`]), and what a message that
//! stands for older messages covers ([`Compaction`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::value::Map;

/// On every envelope of a conversation's turn: which conversation, which turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnOf {
    /// The conversation's id (opaque; an A2A `contextId`).
    pub id: String,
    /// The turn, from 1.
    pub turn: u32,
    /// The turn hands the conversation back to its entry when it ends: an
    /// agent of it said so, or its spec says `next_turn = "entry"`. The
    /// next turn then starts at the entry, not at the agent that answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hand_back: bool,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// On a turn's context: the messages before the context's own are the
/// first `entries` entries of conversation `conversation`'s transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct History {
    /// The conversation's id.
    pub conversation: String,
    /// How many entries of its transcript come first.
    pub entries: u32,
    /// How many messages those entries hold in all.
    pub messages: u32,
    /// The head of the chain after those entries ([`chain`]).
    pub head: String,
    /// The last of those entries that holds the whole transcript (a base
    /// entry, such as a compaction's): readers begin there, not at entry
    /// 1. Absent: they begin at entry 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Base>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// Where a reader of a transcript begins: a base entry, and the head of
/// the chain before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Base {
    /// The entry's number.
    pub entry: u32,
    /// The head of the chain before it.
    pub head: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// On a message that stands for older messages of its conversation (a
/// compaction, when an agent's history is bounded): which messages, and
/// how. The message's `content` is their summary, or empty when they were
/// dropped. A compaction never rewrites the transcript: it is one more
/// message in it, so a replay or a fork rebuilds the same model input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Compaction {
    /// The message stands for the conversation's first `through` messages
    /// (earlier compactions' included).
    pub through: u32,
    /// The model that summarised them; absent when they were dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// The head of an empty transcript.
#[must_use]
pub fn empty_head() -> String {
    crate::hex(&Sha256::digest(b""))
}

/// The head after an entry whose bytes (its msgpack encoding, as stored)
/// are `entry`, following `head`.
#[must_use]
pub fn chain(head: &str, entry: &[u8]) -> String {
    let mut hash = Sha256::new();
    hash.update(head.as_bytes());
    hash.update(entry);
    crate::hex(&hash.finalize())
}

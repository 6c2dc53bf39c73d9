//! Replaying a finished session (an optional extension): a replay is a
//! new session whose envelopes carry [`Replay`], so that its LLM agents
//! reuse the answers and tool results the replayed session recorded in the
//! hop journal. What it starts from is in `start`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::uuid_text;
use crate::value::Map;

/// What a replay reuses, on every envelope of the replaying session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Replay {
    /// The session replayed.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub of: Uuid,
    /// Unix ms: only what the replayed session recorded before this time is
    /// reused (the hop a replay runs again from, and every hop after it,
    /// call the model again). Absent: everything it recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// The model every LLM agent of the replay calls instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tools are called again instead of their recorded results reused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub call_tools: bool,
    /// The session replayed was a conversation's turn: the replay's agents
    /// offer their models what they offer in a turn (`ask_user`), so that
    /// they ask what the turn asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub turn: bool,
    /// The replay evaluates a version (`baton eval`): a tool call that
    /// was recorded with the same arguments gets its recorded result, a
    /// read-only tool may be called again, and any other call is never
    /// made: the session fails with reason `would_write`. Nothing of it is
    /// dead-lettered or handed to a person.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub eval: bool,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Replay {
    /// A replay of session `of` that reuses everything it recorded.
    #[must_use]
    pub fn of(of: Uuid) -> Self {
        Self {
            of,
            before: None,
            model: None,
            call_tools: false,
            turn: false,
            eval: false,
            extra: Map::new(),
        }
    }
}

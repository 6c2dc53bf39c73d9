//! Tool calls that wait for a person (an optional extension): an LLM
//! agent's hop parks its envelope in the inbox with a [`Gate`] when a tool
//! call may not go on without one (its outcome is unknown after a crash, or
//! its tool needs approval); a person's decision is recorded in the hop
//! journal, and the envelope goes back to the agent carrying [`Resumed`],
//! so the hop continues from its journal where it stopped.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::reason::Reason;
use crate::uuid_text;
use crate::value::Map;

/// A tool call waiting for a person, on an envelope parked in the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Gate {
    /// Why it waits: `tool_outcome_unknown` (the call may or may not have
    /// run, and its tool must not be called twice), `approval_required`
    /// (the call is not made until a person approves it) or
    /// `authorization_required` (the MCP server refused the call until a
    /// person signs in again, with `authorize` saying for what).
    pub reason: Reason,
    /// The tool, as the model named it.
    pub tool: String,
    /// The call's arguments: a JSON object, as text.
    pub arguments: String,
    /// Unix ms: when the call was made (`tool_outcome_unknown`) or asked
    /// for (`approval_required`).
    pub at: u64,
    /// The envelope whose hop journal holds the call (the id the hop ran
    /// under on its first delivery).
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub journal: Uuid,
    /// The model call of the hop that asked for the tool call, from 1.
    pub step: u32,
    /// Which call of that answer, from 0.
    pub call: u32,
    /// The SHA-256, in lowercase hex, of the tool's name, a zero byte and
    /// the arguments' JSON text: what an approval is bound to.
    pub digest: String,
    /// Extension, with reason `authorization_required`: the MCP server
    /// that refused the call, and what it asked for; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorize: Option<Authorize>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// What a call that waits for a new sign-in needs: the MCP server (its
/// URL, as the spec's `[[mcp]] url` names it) and the scope its refusal
/// named (`insufficient_scope`), if it named one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Authorize {
    /// The MCP server's URL.
    pub server: String,
    /// The scopes the server asked for, space-separated, as its
    /// `WWW-Authenticate` said them; absent when it named none (a refused
    /// refresh, or a token it no longer takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Why the server refused, in a sentence.
    pub why: String,
}

impl Gate {
    /// The digest an approval of `tool` with `arguments` (JSON text) is bound to.
    #[must_use]
    pub fn digest_of(tool: &str, arguments: &str) -> String {
        use sha2::Digest as _;
        let mut hasher = sha2::Sha256::new();
        hasher.update(tool.as_bytes());
        hasher.update([0]);
        hasher.update(arguments.as_bytes());
        crate::hex(&hasher.finalize())
    }

    /// The id of this gate's inbox entry: derived from the journal, the
    /// call and `label` (what makes one wait of the same call differ from
    /// another), so a redelivered hop parks it under the same id.
    #[must_use]
    pub fn entry_id(&self, label: &str) -> Uuid {
        crate::derive_id_labelled(
            self.journal,
            &format!("gate/{}/{}/{label}", self.step, self.call),
            0,
        )
    }
}

/// On an envelope sent back to its agent after a person's decision: the
/// hop continues the journal of `journal` instead of its own id's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resumed {
    /// The envelope whose hop journal the hop continues.
    #[serde(with = "uuid_text")]
    #[schemars(with = "String", extend("format" = "uuid"))]
    pub journal: Uuid,
    /// What the person decided: `happened`, `not_happened`, `fail`,
    /// `approved` or `denied`.
    pub decision: String,
    /// The tool of the call decided on, as the model named it.
    pub tool: String,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

/// One value of the hop journal (`BATON_JOURNAL`), a MessagePack map; which
/// fields it has depends on its key (PROTOCOL.md, "The hop journal").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// A model answer, as the endpoint's JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// A tool result's text, or a person's note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether the tool said the call failed.
    #[serde(default)]
    pub is_error: bool,
    /// Where the answer came from (a replay's reused answer), or where the
    /// answer asked is (an index entry): an `<envelope>.<step>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When it was recorded, unix ms (index entries, a person's decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// An approval: the [`Gate::digest`] of the call it approves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A person's decision: who took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The user's answer to a question: variables that came with it, for
    /// the agent that asked (`a2a` for an A2A message: its id, metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variables: Option<crate::Value>,
    /// Extension: an exec program's calls in a hop, by label, in the order
    /// they were first made (key `<envelope>.calls`; proto-schemas/exec-calls.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
}

impl JournalEntry {
    /// The key of call `call` of the answer at `step` in the journal of
    /// `journal`, with `suffix` (`started`, `result`, `approved`, `failed`).
    #[must_use]
    pub fn call_key(journal: Uuid, step: u32, call: u32, suffix: &str) -> String {
        format!("{journal}.{step}.{call}.{suffix}")
    }
}

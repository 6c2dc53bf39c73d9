//! One agent's turn in a session's path.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::now_ms;
use crate::reason::Reason;
use crate::value::Map;

/// One agent's turn in a session's path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Hop {
    /// Agent type.
    pub agent: crate::AgentName,
    /// Worker instance that handled it.
    pub instance: String,
    /// When it handled it, unix ms: when the envelope left this agent.
    pub at: u64,
    /// Why control came to this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// Extension (optional): when this agent's worker took the envelope,
    /// unix ms. With `at`, the hop's span even where no `accepted` event
    /// was stored (`--events lean`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<u64>,
    /// Extension (optional): the capabilities this agent was chosen for
    /// (the `requires` of the envelope that reached it), which outcomes
    /// are credited under.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<String>,
    /// Extension (optional): the knowledge domains it was chosen for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
}

impl Hop {
    /// A hop of `agent` on `instance`, now.
    #[must_use]
    pub fn new(
        agent: crate::AgentName,
        instance: impl Into<String>,
        reason: Option<Reason>,
    ) -> Self {
        Self {
            agent,
            instance: instance.into(),
            at: now_ms(),
            reason,
            accepted_at: None,
            requires: Vec::new(),
            domains: Vec::new(),
            extra: Map::new(),
        }
    }
}

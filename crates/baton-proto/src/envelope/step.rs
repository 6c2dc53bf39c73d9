//! One step of a session's reasoning trace.

use schemars::JsonSchema;

use super::presence::Absent;
use crate::now_ms;
use crate::value::{Map, Value};

/// One step of the reasoning trace.
///
/// Like a message, encoding adds no defaulted field (`action`, `outcome`,
/// `reasoning`, `details`, `at`) that a decoded step lacked.
#[derive(Debug, Clone, PartialEq, JsonSchema)]
pub struct Step {
    /// Agent type that took the step.
    // `None`, written `""`, until the runtime fills it in for a step an
    // agent's outcome adds.
    #[schemars(with = "String")]
    pub agent: Option<crate::AgentName>,
    /// What it did.
    #[serde(default)]
    pub action: String,
    /// What came of it.
    #[serde(default)]
    pub outcome: String,
    /// Why.
    #[serde(default)]
    pub reasoning: String,
    /// Anything else worth keeping.
    #[serde(default = "super::nil")]
    #[schemars(with = "serde_json::Value")]
    pub details: Value,
    /// When, unix ms.
    #[serde(default)]
    pub at: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Map,
    /// The defaulted fields the sender left out.
    #[schemars(skip)]
    pub(super) absent: Absent,
}

impl Step {
    /// A trace step by `agent`, now.
    #[must_use]
    pub fn new(
        agent: impl Into<Option<crate::AgentName>>,
        action: impl Into<String>,
        outcome: impl Into<String>,
    ) -> Self {
        Self {
            agent: agent.into(),
            action: action.into(),
            outcome: outcome.into(),
            reasoning: String::new(),
            details: Value::Nil,
            at: now_ms(),
            extra: Map::new(),
            absent: Absent::NONE,
        }
    }

    /// Sets why.
    #[must_use]
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = reasoning.into();
        self
    }
}

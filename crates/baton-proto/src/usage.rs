//! What a session spends on models, and the most it may spend: both travel
//! in the envelope (optional fields), so every hop knows what is left.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Tokens the models read.
    #[serde(default)]
    pub input_tokens: u64,
    /// Tokens the models wrote.
    #[serde(default)]
    pub output_tokens: u64,
    /// Some of it was estimated: a model did not report its usage.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Tokens in and out.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// `self` and `other` together.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            estimated: self.estimated || other.estimated,
        }
    }

    /// What `self` spent beyond `before` (what a delegated child spent of
    /// its own, when `self` is its result's usage and `before` its parent's).
    #[must_use]
    pub fn beyond(self, before: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(before.output_tokens),
            estimated: self.estimated,
        }
    }
}

/// The most a session may spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Tokens in and out, across every hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

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
    /// What it cost, in millionths of the price tables' currency unit, by
    /// the agents' `[llm.price]` tables (calls of agents without one cost 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_micros: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(value: &u64) -> bool {
    *value == 0
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
            cost_micros: self.cost_micros.saturating_add(other.cost_micros),
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
            cost_micros: self.cost_micros.saturating_sub(before.cost_micros),
        }
    }
}

/// The most a session may spend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    /// Tokens in and out, across every hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Cost, in millionths of the price tables' currency unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_micros: Option<u64>,
}

/// `micros` millionths as a decimal amount: `12_300` is `0.0123`.
#[must_use]
pub fn amount(micros: u64) -> String {
    let text = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A decimal amount (`0.50`) in millionths; `None` when it is not a plain
/// non-negative decimal with at most six places.
#[must_use]
pub fn micros(amount: &str) -> Option<u64> {
    let (whole, fraction) = amount.split_once('.').unwrap_or((amount, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty())
        || !digits(whole)
        || !digits(fraction)
        || fraction.len() > 6
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction: u64 = format!("{fraction:0<6}").parse().ok()?;
    whole.checked_mul(1_000_000)?.checked_add(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_and_print_in_millionths() {
        assert_eq!(micros("0.50"), Some(500_000));
        assert_eq!(micros("2"), Some(2_000_000));
        assert_eq!(micros(".25"), Some(250_000));
        assert_eq!(micros("0.000001"), Some(1));
        for bad in ["", ".", "-1", "1e3", "0.0000001", "abc", "1.2.3"] {
            assert_eq!(micros(bad), None, "{bad}");
        }
        assert_eq!(amount(500_000), "0.5");
        assert_eq!(amount(12_300), "0.0123");
        assert_eq!(amount(2_000_000), "2");
        assert_eq!(amount(0), "0");
    }
}

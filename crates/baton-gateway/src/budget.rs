//! A session's token budget as a gateway sets it. The gateway's own budget
//! (`--budget-tokens` of `baton mcp serve` and `baton a2a serve`) is the
//! most any session it starts may spend; a caller may ask for less, never
//! for more.

use baton_proto::Budget;

/// The budget of a session a caller starts: the smaller of what it asked
/// for (`asked`, the JSON value of its `budget_tokens`) and the gateway's
/// `cap`. `None` when neither sets one (the router's default may still).
///
/// # Errors
///
/// When `asked` is not a whole number of tokens, at least 1: the text says
/// so, for the caller.
pub fn budget(
    asked: Option<&serde_json::Value>,
    cap: Option<u64>,
) -> Result<Option<Budget>, String> {
    let asked = match asked {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => match whole(value) {
            Some(tokens) if tokens >= 1 => Some(tokens),
            _ => {
                return Err(format!(
                    "`budget_tokens` must be a whole number of tokens, at least 1 (got {value})"
                ));
            }
        },
    };
    let tokens = match (asked, cap) {
        (Some(asked), Some(cap)) => Some(asked.min(cap)),
        (one, other) => one.or(other),
    };
    Ok(tokens.map(|tokens| Budget {
        tokens: Some(tokens),
        cost_micros: None,
    }))
}

/// A whole number, written as one or (as protobuf's `Struct`, which A2A's
/// metadata is, writes every number) as a float without a fraction.
fn whole(value: &serde_json::Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let float = value.as_f64()?;
        // Up to 2^53, where a float still holds every whole number.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        (float.fract() == 0.0 && (0.0..=9_007_199_254_740_992.0).contains(&float))
            .then_some(float as u64)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tokens(asked: Option<serde_json::Value>, cap: Option<u64>) -> Result<Option<u64>, String> {
        budget(asked.as_ref(), cap).map(|b| b.and_then(|b| b.tokens))
    }

    #[test]
    fn a_caller_may_ask_for_less_than_the_gateway_allows_never_more() {
        assert_eq!(tokens(None, None), Ok(None));
        assert_eq!(tokens(Some(json!(null)), Some(500)), Ok(Some(500)));
        assert_eq!(tokens(Some(json!(200)), None), Ok(Some(200)));
        assert_eq!(tokens(Some(json!(200)), Some(500)), Ok(Some(200)));
        assert_eq!(tokens(Some(json!(900)), Some(500)), Ok(Some(500)));
        // A2A metadata is a protobuf Struct: its numbers arrive as floats.
        assert_eq!(tokens(Some(json!(300.0)), None), Ok(Some(300)));
    }

    #[test]
    fn a_budget_that_is_not_a_positive_whole_number_is_refused() {
        for bad in [
            json!(0),
            json!(-3),
            json!(2.5),
            json!(0.0),
            json!(-1.0),
            json!("100"),
            json!([1]),
        ] {
            let err = tokens(Some(bad.clone()), Some(500)).unwrap_err();
            assert!(err.contains("`budget_tokens`"), "{bad}: {err}");
        }
    }
}

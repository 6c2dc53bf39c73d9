//! A session's budget as a gateway sets it. The gateway's own budget
//! (`--budget-tokens` and `--budget-cost` of `baton mcp serve` and `baton
//! a2a serve`) is the most any session it starts may spend; a caller may
//! ask for less (`budget_tokens`, `budget_cost`), never for more.

use baton_proto::Budget;

/// The budget of a session a caller starts: for tokens and for cost each,
/// the smaller of what it asked for (the JSON values of its
/// `budget_tokens` and `budget_cost`) and the gateway's `cap`. `None` when
/// neither sets one (the router's default may still).
///
/// # Errors
///
/// When `tokens` is not a whole number of tokens, at least 1, or `cost` not
/// an amount above 0 (a number, or a decimal string such as `"0.50"`, at
/// most six places): the text says so, for the caller.
// The error is text because it is the payload: the MCP tool error or the
// A2A `InvalidParams` message the caller reads, sent as it is.
pub fn budget(
    tokens: Option<&serde_json::Value>,
    cost: Option<&serde_json::Value>,
    cap: Budget,
) -> Result<Option<Budget>, String> {
    let tokens = match asked(tokens) {
        None => None,
        Some(value) => match whole(value) {
            Some(tokens) if tokens >= 1 => Some(tokens),
            _ => {
                return Err(format!(
                    "`budget_tokens` must be a whole number of tokens, at least 1 (got {value})"
                ));
            }
        },
    };
    let cost = match asked(cost) {
        None => None,
        Some(value) => match micros(value) {
            Some(micros) if micros >= 1 => Some(micros),
            _ => {
                return Err(format!(
                    "`budget_cost` must be an amount above 0, such as 0.50, with at most six decimal places (got {value})"
                ));
            }
        },
    };
    let budget = Budget {
        tokens: smaller(tokens, cap.tokens),
        cost_micros: smaller(cost, cap.cost_micros),
    };
    Ok((budget.tokens.is_some() || budget.cost_micros.is_some()).then_some(budget))
}

/// A value the caller gave (null is none).
fn asked(value: Option<&serde_json::Value>) -> Option<&serde_json::Value> {
    value.filter(|value| !value.is_null())
}

/// The smaller of what was asked and the cap, either of which may be absent.
fn smaller(asked: Option<u64>, cap: Option<u64>) -> Option<u64> {
    match (asked, cap) {
        (Some(asked), Some(cap)) => Some(asked.min(cap)),
        (one, other) => one.or(other),
    }
}

/// An amount in millionths: a decimal string, or a number as JSON writes it.
fn micros(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::String(text) => baton_proto::micros(text),
        serde_json::Value::Number(number) => baton_proto::micros(&number.to_string()),
        _ => None,
    }
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
        let cap = Budget {
            tokens: cap,
            cost_micros: None,
        };
        budget(asked.as_ref(), None, cap).map(|b| b.and_then(|b| b.tokens))
    }

    fn cost(asked: serde_json::Value, cap: Option<u64>) -> Result<Option<u64>, String> {
        let cap = Budget {
            tokens: None,
            cost_micros: cap,
        };
        budget(None, Some(&asked), cap).map(|b| b.and_then(|b| b.cost_micros))
    }

    #[test]
    fn a_cost_budget_is_an_amount_and_the_gateway_caps_it() {
        assert_eq!(cost(json!("0.50"), None), Ok(Some(500_000)));
        assert_eq!(cost(json!(0.25), Some(500_000)), Ok(Some(250_000)));
        assert_eq!(cost(json!(2), Some(500_000)), Ok(Some(500_000)));
        assert_eq!(cost(json!(null), Some(500_000)), Ok(Some(500_000)));
        for bad in [
            json!(0),
            json!("0"),
            json!(-1),
            json!("lots"),
            json!(1e-9),
            json!(true),
        ] {
            let err = cost(bad.clone(), None).unwrap_err();
            assert!(err.contains("`budget_cost`"), "{bad}: {err}");
        }
        // Both kinds at once, each capped on its own.
        let cap = Budget {
            tokens: Some(1000),
            cost_micros: Some(100),
        };
        let both = budget(Some(&json!(5000)), None, cap).unwrap().unwrap();
        assert_eq!((both.tokens, both.cost_micros), (Some(1000), Some(100)));
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

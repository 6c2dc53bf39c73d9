//! A session's budget, as an LLM agent keeps to it: what each model answer
//! spent (its reported usage, or an estimate marked as one, priced by
//! `[llm.price]`), and the check before each call that would pass the
//! session's token or cost budget, or the agent's own cap per hop.

use crate::limits::{tokens_in, with_answer};
use crate::llm::types::response::ChatResponse;
use crate::spec::{LlmSpec, PriceSpec};
use baton_proto::{Reason, Usage, Value, amount};
use baton_worker::{ContextUpdate, Outcome, Task};

/// What `answer` spent: the usage it reports, or, when it reports none, an
/// estimate (four characters a token; its prompt was about `prompt` tokens)
/// marked as one; priced by `price`.
pub(super) fn usage_of(answer: &ChatResponse, prompt: u64, price: Option<&PriceSpec>) -> Usage {
    let usage = answer.usage;
    let (input_tokens, output_tokens, estimated) =
        match (usage.prompt_tokens, usage.completion_tokens) {
            (Some(input), Some(output)) => (input, output, false),
            // The message as it came, `null` when there is none.
            _ => (
                prompt,
                tokens_in(std::slice::from_ref(&answer.message().raw)),
                true,
            ),
        };
    Usage {
        input_tokens,
        output_tokens,
        estimated,
        cost_micros: price.map_or(0, |p| p.micros(input_tokens, output_tokens)),
    }
}

/// What the session spent, up to now in this hop.
fn spent(task: &Task) -> Usage {
    task.envelope
        .usage
        .unwrap_or_default()
        .plus(task.progress.spending())
}

/// A budget the next call would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overrun {
    /// The session's budget (`false`: the agent's cap per hop).
    session: bool,
    /// Counted in cost (millionths), not tokens.
    cost: bool,
    spent: u64,
    limit: u64,
    next: u64,
}

impl Overrun {
    fn check(session: bool, cost: bool, spent: u64, limit: Option<u64>, next: u64) -> Option<Self> {
        let limit = limit?;
        (spent.saturating_add(next) > limit).then_some(Self {
            session,
            cost,
            spent,
            limit,
            next,
        })
    }

    /// A count as people read it: tokens, or an amount.
    fn show(&self, value: u64) -> String {
        if self.cost {
            amount(value)
        } else {
            format!("{value} tokens")
        }
    }

    fn number(&self, value: u64) -> Value {
        if self.cost {
            #[allow(clippy::cast_precision_loss)] // millionths of a currency unit
            Value::from(value as f64 / 1e6)
        } else {
            Value::from(value)
        }
    }
}

/// The budget the next call would pass, if any, its prompt being about
/// `prompt` tokens: the session's tokens, then its cost, then the agent's
/// cap per hop.
pub(super) fn over(task: &Task, prompt: u64, settings: &LlmSpec) -> Option<Overrun> {
    let budget = task.envelope.budget.unwrap_or_default();
    let session = spent(task);
    let next = with_answer(prompt, settings.max_tokens);
    let next_cost = settings
        .price
        .map(|price| price.micros(prompt, next.saturating_sub(prompt)));
    Overrun::check(true, false, session.total(), budget.tokens, next)
        .or_else(|| {
            // An agent without a price table adds nothing to a cost budget.
            let next_cost = next_cost?;
            Overrun::check(
                true,
                true,
                session.cost_micros,
                budget.cost_micros,
                next_cost,
            )
        })
        .or_else(|| {
            let hop = task.progress.spending().total();
            Overrun::check(false, false, hop, settings.hop_budget_tokens, next)
        })
}

/// The outcome of a hop whose next model call would pass a budget
/// (`overrun`): the fallback, with reason `budget_exceeded`, the spending and
/// the limit in the context (`variables.budget_exceeded`, and `problem`).
pub(crate) fn out_of_budget(overrun: Overrun, update: ContextUpdate) -> Outcome {
    let (unit, scope) = (
        if overrun.cost { "cost" } else { "tokens" },
        if overrun.session { "session" } else { "hop" },
    );
    let said = Value::Map(vec![
        (Value::from("scope"), Value::from(scope)),
        (
            Value::from(format!("spent_{unit}")),
            overrun.number(overrun.spent),
        ),
        (
            Value::from(format!("limit_{unit}")),
            overrun.number(overrun.limit),
        ),
        (
            Value::from(format!("next_call_{unit}")),
            overrun.number(overrun.next),
        ),
    ]);
    let (spent, limit, next) = (
        overrun.show(overrun.spent),
        overrun.show(overrun.limit),
        overrun.show(overrun.next),
    );
    let problem = if overrun.session {
        format!(
            "the session spent {spent} of its budget of {limit}, and the next model call (about {next}) would pass it"
        )
    } else {
        format!(
            "the agent spent {spent} in this hop, its cap per hop is {limit}, and the next model call (about {next}) would pass it"
        )
    };
    // The update first: it replaces the whole context update.
    Outcome::fallback(Reason::BudgetExceeded)
        .with_update(update)
        .problem(problem)
        .set_var("budget_exceeded", said)
        .into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reported_usage_is_taken_and_a_missing_one_is_estimated_and_marked() {
        let messages = [json!({"role": "user", "content": "x".repeat(400)})];
        let reported = json!({
            "choices": [{"message": {"content": "ok"}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        });
        let usage = usage_of(&ChatResponse::of(&reported), tokens_in(&messages), None);
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.estimated),
            (7, 3, false)
        );
        let silent = json!({"choices": [{"message": {"content": "y".repeat(40)}}]});
        let usage = usage_of(&ChatResponse::of(&silent), tokens_in(&messages), None);
        assert!(usage.estimated, "marked as an estimate");
        assert!((100..=120).contains(&usage.input_tokens), "{usage:?}");
        assert!((10..=20).contains(&usage.output_tokens), "{usage:?}");
    }
}

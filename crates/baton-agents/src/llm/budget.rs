//! A session's token budget, as an LLM agent keeps to it: what each model
//! answer spent (its reported usage, or an estimate marked as one), and the
//! check before each call that would pass the budget.

use baton_proto::{Reason, Usage, Value};
use baton_worker::{ContextUpdate, Outcome, Task};
use serde_json::Value as Json;

use super::LlmRunner;
use crate::limits::{estimate, tokens_in};

/// What `answer` spent: the usage it reports, or, when it reports none, an
/// estimate (four characters a token) marked as one.
pub(super) fn usage_of(answer: &Json, messages: &[Json]) -> Usage {
    let usage = &answer["usage"];
    match (
        usage["prompt_tokens"].as_u64(),
        usage["completion_tokens"].as_u64(),
    ) {
        (Some(input), Some(output)) => Usage {
            input_tokens: input,
            output_tokens: output,
            estimated: false,
        },
        _ => Usage {
            input_tokens: tokens_in(messages),
            output_tokens: tokens_in(std::slice::from_ref(&answer["choices"][0]["message"])),
            estimated: true,
        },
    }
}

/// What the session spent, up to now in this hop.
fn spent(task: &Task) -> Usage {
    task.envelope
        .usage
        .unwrap_or_default()
        .plus(task.progress.spending())
}

/// `(spent, limit, next)` when the next call of `messages`, about `next`
/// tokens, would pass `task`'s session budget.
pub(super) fn over(
    task: &Task,
    messages: &[Json],
    max_tokens: Option<u32>,
) -> Option<(u64, u64, u64)> {
    let limit = task.envelope.budget?.tokens?;
    let spent = spent(task).total();
    let next = estimate(messages, max_tokens);
    (spent.saturating_add(next) > limit).then_some((spent, limit, next))
}

impl LlmRunner {
    /// The outcome of a hop whose next model call would pass the session's
    /// budget: the fallback, with reason `budget_exceeded`, the spending and
    /// the limit in the context (`variables.budget_exceeded`).
    pub(super) fn out_of_budget(
        &self,
        task: &Task,
        messages: &[Json],
        update: ContextUpdate,
    ) -> Outcome {
        let (spent, limit, next) =
            over(task, messages, self.settings.max_tokens).unwrap_or((spent(task).total(), 0, 0));
        let said = Value::Map(vec![
            (Value::from("spent_tokens"), Value::from(spent)),
            (Value::from("limit_tokens"), Value::from(limit)),
            (Value::from("next_call_tokens"), Value::from(next)),
        ]);
        // The update first: it replaces the whole context update.
        Outcome::fallback(Reason::BudgetExceeded)
            .with_update(update)
            .problem(format!(
                "the session spent {spent} of its {limit} tokens, and the next model call (about {next}) would pass the budget"
            ))
            .set_var("budget_exceeded", said)
            .into()
    }
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
        let usage = usage_of(&reported, &messages);
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.estimated),
            (7, 3, false)
        );
        let silent = json!({"choices": [{"message": {"content": "y".repeat(40)}}]});
        let usage = usage_of(&silent, &messages);
        assert!(usage.estimated, "marked as an estimate");
        assert!((100..=120).contains(&usage.input_tokens), "{usage:?}");
        assert!((10..=20).contains(&usage.output_tokens), "{usage:?}");
    }
}

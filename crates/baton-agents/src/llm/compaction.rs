//! Compaction, above the answer and below the runner: a bounded history
//! (`[llm.history]`): before the agent's first model
//! call of a hop, a conversation past the bound gives way to its newest
//! whole exchanges, and one message that stands for the older ones, their
//! summary or nothing. The compaction goes into the hop's context update,
//! so it is one more message of the transcript, never a rewrite of it.
//!
//! An exchange begins at a user message and runs to the next one, so a
//! tool call and its result are always in the same exchange. The newest
//! exchanges are kept while they fit in half the bound (the newest always),
//! so a conversation is compacted about once per half a bound, not at
//! every turn.

//!
//! - [`Compactions`]: compacts a hop's conversation, and counts it;
//! - [`Compacting`]: what compacting came to;
//! - `cut`, `through`, `transcript`: where a conversation is cut, what the
//!   cut stands for, and the older messages as the summariser reads them.

use baton_proto::{Compaction, Message, Role};
use baton_worker::{AgentError, Compacted, Task};
use opentelemetry::metrics::Counter;

use super::answer::budget::Overrun;
use super::answer::{Answers, Asking, Reply};
use super::types::prompt::summary_request;
use crate::spec::{HistorySpec, LlmSpec};

/// The journal's step of a hop's summary call (the agent's own calls count
/// from 1).
const SUMMARY_STEP: u32 = 0;

/// Compacts conversations past the spec's bound, counting them by kind
/// (`baton.conversation.compactions`).
#[derive(Debug, Clone)]
pub(crate) struct Compactions(Counter<u64>);

/// What compacting a hop's conversation came to.
pub(crate) enum Compacting {
    /// The conversation is within its bound (or the spec sets none).
    Needless,
    /// The older messages give way to this one.
    Compacted(Box<Compacted>),
    /// A summary would pass this budget: nothing was asked.
    Overrun(Overrun),
}

/// About how many tokens `message` holds: four characters a token.
fn tokens(message: &Message) -> u64 {
    let calls = message
        .tool_calls
        .as_ref()
        .map_or(0, |calls| calls.to_string().len());
    ((message.content.len() + calls) as u64).div_ceil(4)
}

/// Where `messages` are cut under `bound`: the first message kept, or
/// `None` when they are within it or nothing older than the newest
/// exchange could go.
fn cut(messages: &[Message], bound: &HistorySpec) -> Option<usize> {
    let count = messages.len();
    let size: u64 = messages.iter().map(tokens).sum();
    let over_count = bound.max_messages.is_some_and(|most| count > most as usize);
    let over_size = bound.max_tokens.is_some_and(|most| size > u64::from(most));
    if !(over_count || over_size) {
        return None;
    }
    let keep_count = bound
        .max_messages
        .map_or(usize::MAX, |most| most as usize / 2);
    let keep_size = bound
        .max_tokens
        .map_or(u64::MAX, |most| u64::from(most) / 2);
    let starts = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| message.role == Role::User && message.compaction.is_none())
        .map(|(at, _)| at);
    let mut kept = None;
    for start in starts.rev() {
        let tail = &messages[start..];
        let tail_size: u64 = tail.iter().map(tokens).sum();
        if kept.is_some() && (tail.len() > keep_count || tail_size > keep_size) {
            break;
        }
        kept = Some(start);
    }
    let first_kept = kept?;
    let only_a_summary = first_kept == 1 && messages[0].compaction.is_some();
    (first_kept > 0 && !only_a_summary).then_some(first_kept)
}

/// How many of the conversation's messages the first `cut` of `messages`
/// stand for: an earlier compaction's, and those after it.
fn through(messages: &[Message], cut: usize) -> u32 {
    let (before, counted) = match messages.first().and_then(|m| m.compaction.as_ref()) {
        Some(earlier) => (earlier.through, cut - 1),
        None => (0, cut),
    };
    before.saturating_add(u32::try_from(counted).unwrap_or(u32::MAX))
}

/// `messages` as text for the summarising model, one per paragraph.
fn transcript(messages: &[Message]) -> String {
    let lines: Vec<String> = messages
        .iter()
        .map(|message| {
            if message.compaction.is_some() {
                return format!("(summary of what came before) {}", message.content);
            }
            let who = match (&message.role, &message.name) {
                (Role::User, _) => "user".to_owned(),
                (role, Some(name)) => format!("{} ({name})", role.as_str()),
                (role, None) => role.as_str().to_owned(),
            };
            match &message.tool_calls {
                Some(calls) => format!("{who}: {} [called {calls}]", message.content),
                None => format!("{who}: {}", message.content),
            }
        })
        .collect();
    lines.join("\n\n")
}

impl Compactions {
    pub(crate) fn new() -> Self {
        Self(
            baton_nats::meter::meter()
                .u64_counter("baton.conversation.compactions")
                .with_description("Conversations whose older exchanges gave way to one message under [llm.history], by kind (summarized, dropped)")
                .build(),
        )
    }

    /// The compaction `task`'s conversation needs before the agent's model
    /// reads it, when `settings` bound the history; a summary is asked of
    /// `answers`.
    ///
    /// # Errors
    ///
    /// As a model call's.
    pub(crate) async fn compact(
        &self,
        answers: &Answers,
        settings: &LlmSpec,
        task: &Task,
    ) -> Result<Compacting, AgentError> {
        let Some(bound) = &settings.history else {
            return Ok(Compacting::Needless);
        };
        let messages = &task.envelope.context.messages;
        let Some(cut) = cut(messages, bound) else {
            return Ok(Compacting::Needless);
        };
        let older = &messages[..cut];
        let model = bound.summarizer(&settings.model);
        let summary = match model {
            Some(model) => {
                let asked = summary_request(transcript(older));
                let answered = answers
                    .answer(task, (SUMMARY_STEP, Asking::Summary(model)), &asked)
                    .await?;
                let summary = match answered {
                    Reply::Answered(answered) => answered.response.text().to_owned(),
                    Reply::Overrun(overrun) => return Ok(Compacting::Overrun(overrun)),
                };
                // No text would drop the older messages silently, as if the
                // spec said `older = "drop"`; the answer is on record, so
                // asking again would read the same.
                if summary.trim().is_empty() {
                    return Err(AgentError::fatal(format!(
                        "[llm.history] the summary model {model} answered no text for {cut} older messages: check summary_model, or set older = \"drop\""
                    )));
                }
                summary
            }
            None => String::new(),
        };
        let mut message = Message::new(Role::System, summary);
        message.compaction = Some(Compaction {
            through: through(messages, cut),
            model: model.map(str::to_owned),
            extra: baton_proto::Map::new(),
        });
        let kind = if model.is_some() {
            "summarized"
        } else {
            "dropped"
        };
        self.0.add(1, &[opentelemetry::KeyValue::new("kind", kind)]);
        Ok(Compacting::Compacted(Box::new(Compacted {
            replaces: cut,
            message,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Older;

    fn bound(messages: u32) -> HistorySpec {
        HistorySpec {
            max_messages: Some(messages),
            max_tokens: None,
            older: Older::Summarize,
            summary_model: None,
        }
    }

    /// A conversation of `turns` exchanges, each a user message, a tool
    /// call, its result and an answer.
    fn conversation(turns: usize) -> Vec<Message> {
        let mut messages = Vec::new();
        for turn in 0..turns {
            messages.push(Message::new(Role::User, format!("question {turn}")));
            let mut call = Message::new(Role::Agent, "");
            call.tool_calls = Some(baton_proto::Value::from("lookup"));
            messages.push(call);
            messages.push(Message::new(Role::Tool, "found"));
            messages.push(Message::new(Role::Agent, format!("answer {turn}")));
        }
        messages
    }

    #[test]
    fn within_the_bound_nothing_is_cut() {
        assert_eq!(cut(&conversation(3), &bound(12)), None);
    }

    #[test]
    fn past_the_bound_the_newest_whole_exchanges_in_half_of_it_stay() {
        let messages = conversation(4);
        // 16 messages, bound 12: keep at most 6, so one exchange of 4.
        assert_eq!(cut(&messages, &bound(12)), Some(12));
        assert_eq!(messages[12].role, Role::User);
        // Bound 2: the newest exchange stays whole though it is larger.
        assert_eq!(cut(&messages, &bound(2)), Some(12));
    }

    #[test]
    fn an_earlier_summary_is_counted_and_summarised_again() {
        let mut summary = Message::new(Role::System, "earlier");
        summary.compaction = Some(Compaction {
            through: 40,
            model: None,
            extra: baton_proto::Map::new(),
        });
        let mut messages = vec![summary];
        messages.extend(conversation(4));
        let at = cut(&messages, &bound(12)).unwrap_or_default();
        assert_eq!(at, 13);
        assert_eq!(through(&messages, at), 52);
        // Only the summary before the newest exchange: nothing to do.
        let mut short = vec![messages[0].clone()];
        short.extend(conversation(1));
        assert_eq!(cut(&short, &bound(2)), None);
    }

    #[test]
    fn a_token_bound_cuts_by_size() {
        let mut messages = conversation(2);
        messages[0].content = "x".repeat(4000);
        let by_size = HistorySpec {
            max_messages: None,
            max_tokens: Some(500),
            ..bound(2)
        };
        assert_eq!(cut(&messages, &by_size), Some(4));
        assert!(transcript(&messages[..4]).starts_with("user: xxx"));
    }
}

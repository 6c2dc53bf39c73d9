//! `ask_user`: in a conversation's turn, an LLM agent may ask the user a
//! question. The hop parks in the inbox (reason `input_required`) and the
//! turn waits; the user's answer, recorded in the hop journal as the tool
//! call's result, resumes the same agent from its journal, so nothing it
//! did before asking is done again.

use baton_proto::{Message, Reason, Role};
use baton_worker::{AgentError, ContextUpdate, Outcome, Task};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::answer::journal_of;
use super::calling::{Parking, Turn};
use super::types::chat::{ChatMessage, ToolCall, calls_as_sent, lenient, read_object};
use super::types::offer::ASK_USER;
use super::{LlmRunner, asked};
use crate::journal::Recorded;

/// The arguments of an `ask_user` call.
#[derive(Default, Deserialize)]
struct Asked {
    #[serde(default, deserialize_with = "lenient")]
    question: String,
}

/// Whether the model's calls are one call of `ask_user`.
pub(super) fn is_ask(calls: &[ToolCall]) -> bool {
    calls.len() == 1 && calls[0].function.name == ASK_USER
}

impl LlmRunner {
    /// Whether the model may ask the user: the task is a conversation's
    /// turn (or a replay of one, which must ask what the turn asked), and
    /// the spec leaves `ask_user` on.
    pub(super) fn asks_user(&self, task: &Task) -> bool {
        let turn = task.envelope.conversation.is_some()
            || task
                .envelope
                .replay
                .as_ref()
                .is_some_and(|replay| replay.turn);
        self.settings.ask_user && self.inbox.is_some() && turn
    }

    /// The model asked the user: with the answer on record, it goes back to
    /// the model as the call's result (`None`: the hop goes on); else the
    /// hop parks in the inbox, and `Some` is its end, waiting for input.
    pub(super) async fn ask(
        &self,
        turn: &Turn<'_>,
        messages: &mut Vec<ChatMessage>,
        update: &mut ContextUpdate,
    ) -> Result<Option<Outcome>, AgentError> {
        let call = &turn.calls[0];
        let arguments: Json = call
            .function
            .arguments
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_else(|| json!({}));
        let journal = journal_of(turn.task);
        let recorded = self.answers.journal.call(journal, turn.step, 0).await?;
        let Recorded::Result(answer, _) = recorded else {
            let Asked { question } = read_object(&arguments).unwrap_or_default();
            let parking = Parking {
                turn,
                index: 0,
                tool: ASK_USER,
                args: &arguments,
                reason: Reason::InputRequired,
                label: "ask".to_owned(),
                at: baton_proto::now_ms(),
                authorize: None,
            };
            let waiting = self.park(parking, update).await?;
            return Ok(Some(match waiting {
                Outcome::Wait(wait) => wait.say(question).into(),
                other => other,
            }));
        };
        let id = call.id().unwrap_or_default().to_owned();
        messages.push(ChatMessage::asked(turn.content, turn.calls));
        messages.push(ChatMessage::result(id.as_str(), answer.as_str()));
        let sent = calls_as_sent(turn.calls);
        update.messages.push(asked(turn.content, &sent));
        let mut answered = Message::new(Role::Tool, answer);
        answered.tool_call_id = Some(id);
        answered.name = Some(ASK_USER.to_owned());
        update.messages.push(answered);
        Ok(None)
    }
}

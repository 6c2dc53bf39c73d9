//! A message without a task id: said to its context's conversation
//! through the runtime's one entry point (`Conversations::say_recorded`),
//! which makes it the next turn, or the answer to a question an agent of it
//! asked. The gateway only maps it: the task index written beside it, the
//! refusals to JSON-RPC errors.

use a2a::{JsonRpcError, SendMessageRequest, error_code};
use baton_client::ErrorKind;
use baton_client::conversation::{Taken, UserMessage};
use baton_gateway::callers::Caller;
use baton_proto::{AgentName, Overlap, Value, now_ms};
use uuid::Uuid;

use crate::Gateway;
use crate::index::Record;
use crate::ops::{error, internal};

impl Gateway {
    /// Sends the message's `text` and `variables` as the next turn of its
    /// context (a new conversation without one), or as the answer when an
    /// agent of the conversation asked the user; its session, context id,
    /// the events to skip when following it, and the turn (whose events
    /// close it at its end).
    pub(crate) async fn turn(
        &self,
        target: Option<&AgentName>,
        request: &SendMessageRequest,
        text: String,
        variables: Vec<(String, Value)>,
        live: bool,
        caller: &Caller,
    ) -> Result<crate::ops::Begun, JsonRpcError> {
        let (budget, overlap) = self.asked(request)?;
        // The context is the conversation; a message without one starts a new one.
        let context = request
            .message
            .context_id
            .clone()
            .filter(|context| !context.is_empty())
            .unwrap_or_else(|| Uuid::new_v4().to_string());
        let mut message = UserMessage::new(text);
        message.caller = caller.0.clone();
        message.overlap = overlap;
        message.turn.stream = live;
        message.turn.budget = budget;
        message.turn.to = target.cloned();
        message.turn.variables.extend(variables);
        message
            .turn
            .variables
            .insert("a2a".to_owned(), crate::terms::to_agent(&request.message));
        message.via = "a2a".to_owned();
        let session = message.turn.session;
        // Recorded before the task is sent, so every read of it finds its
        // context, and a streaming caller follows it as soon as it can;
        // meanwhile the conversation is read (or its turn claimed).
        let record = Record {
            context: context.clone(),
            agent: target.map(ToString::to_string),
            at: now_ms(),
            caller: caller.0.clone(),
        };
        let said = self
            .conversations
            .say_recorded(&context, message, || self.index.put(session, &record))
            .await;
        match said {
            Ok(turn) => {
                if let Taken::Answered {
                    session: waiting, ..
                } = &turn.taken
                {
                    // The answer to the question its conversation waits on:
                    // no task of its own is listed, the asking one goes on.
                    self.forget(session).await;
                    tracing::info!(%waiting, %context, "A2A message answered a question");
                } else {
                    let said = &turn.taken;
                    tracing::info!(%session, %context, agent = ?record.agent, ?said, "A2A message sent");
                }
                let seen = match &turn.taken {
                    Taken::Answered { seen, .. } => seen.clone(),
                    _ => baton_client::Seen::default(),
                };
                Ok(crate::ops::Begun {
                    session: turn.session(),
                    context,
                    seen,
                    turn: Some(turn),
                })
            }
            Err(err) => {
                // Refused: no task of it is listed.
                self.forget(session).await;
                Err(refusal(&err))
            }
        }
    }

    /// What the message's metadata asks for: a budget within the gateway's,
    /// and an overlap policy (the gateway's by default).
    fn asked(
        &self,
        request: &SendMessageRequest,
    ) -> Result<(Option<baton_proto::Budget>, Overlap), JsonRpcError> {
        let metadata = request.message.metadata.as_ref();
        let asked = |key: &str| metadata.and_then(|m| m.get(key));
        let budget =
            baton_gateway::budget(asked("budget_tokens"), asked("budget_cost"), self.budget)
                .map_err(|why| error(error_code::INVALID_PARAMS, why))?;
        let overlap = match asked("overlap") {
            None => self.overlap,
            Some(name) => name.as_str().and_then(Overlap::parse).ok_or_else(|| {
                error(
                    error_code::INVALID_PARAMS,
                    format!(
                        "metadata overlap {name} is not a policy: enqueue, reject or interrupt"
                    ),
                )
            })?,
        };
        Ok((budget, overlap))
    }

    /// Forgets task `session`, which did not start.
    async fn forget(&self, session: Uuid) {
        if let Err(forgot) = self.index.forget(session).await {
            tracing::warn!(error = %forgot, %session, "cannot forget a task that did not start");
        }
    }
}

/// A conversation's refusal as the caller's error.
fn refusal(err: &baton_client::Error) -> JsonRpcError {
    match err.kind() {
        ErrorKind::Busy => error(error_code::UNSUPPORTED_OPERATION, err.to_string()),
        ErrorKind::NotOwner | ErrorKind::Deleted => {
            error(error_code::INVALID_PARAMS, err.to_string())
        }
        _ => internal(baton_nats::error_chain(err)),
    }
}

//! A message without a task id: the next turn of its context's
//! conversation, or the answer to a question an agent of it asked.

use a2a::{JsonRpcError, SendMessageRequest, error_code};
use baton_gateway::callers::Caller;
use baton_proto::{AgentName, Conversation, Overlap, Value, now_ms};
use baton_worker::conversation::{ConversationErrorKind, UserMessage};
use uuid::Uuid;

use crate::Gateway;
use crate::index::Record;
use crate::ops::{error, internal};

impl Gateway {
    /// Sends the message's `text` and `variables` as the next turn of its
    /// context (a new conversation without one), or as the answer when an
    /// agent of the conversation asked the user; its session, context id,
    /// and how many of its events to skip when following it.
    pub(crate) async fn turn(
        &self,
        target: Option<&AgentName>,
        request: &SendMessageRequest,
        text: String,
        variables: Vec<(String, Value)>,
        live: bool,
        caller: &Caller,
    ) -> Result<(Uuid, String, usize), JsonRpcError> {
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
        message.turn.to = target.map(ToString::to_string);
        message.turn.variables.extend(variables);
        let session = message.turn.session;
        // Recorded before the task is sent, so every read of it finds its
        // context, and a streaming caller follows it as soon as it can;
        // meanwhile the conversation is read.
        let record = Record {
            context: context.clone(),
            agent: target.map(ToString::to_string),
            at: now_ms(),
            caller: caller.0.clone(),
        };
        if let Some(sent) = self.claim_turn(&context, &message, &record).await? {
            tracing::info!(%session, %context, agent = ?record.agent, ?sent, claimed = true, "A2A message sent");
            return Ok((session, context, 0));
        }
        let (read, put) = tokio::join!(
            self.conversations.get(&context),
            self.index.put(session, &record)
        );
        let asking = match &read {
            Ok(read) => self.asking(&context, caller, read.as_ref()).await,
            Err(err) => Err(internal(err)),
        };
        if !matches!(asking, Ok(None)) || put.is_err() {
            // Not a new turn (or the conversation or the task could not be
            // stored): its task is not listed.
            self.forget(session).await;
        }
        put.map_err(internal)?;
        let read = read.map_err(internal)?;
        if let Some(waiting) = asking? {
            // The conversation waits for the user's answer: this message is it.
            return self
                .answer(
                    &waiting.to_string(),
                    &message.turn.text,
                    &request.message,
                    caller,
                )
                .await;
        }
        let sent = self.send_turn(&context, &message, read).await?;
        tracing::info!(%session, %context, agent = ?record.agent, ?sent, "A2A message sent");
        Ok((session, context, 0))
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

    /// Starts `message` as the next turn of conversation `context` when
    /// this gateway stored its record last and it is idle: the turn is
    /// claimed while the task is recorded in the index, and sent once both
    /// are durable. `None` when it could not be claimed so (nothing sent):
    /// the message then goes the usual way.
    async fn claim_turn(
        &self,
        context: &str,
        message: &UserMessage,
        record: &Record,
    ) -> Result<Option<baton_worker::conversation::Sent>, JsonRpcError> {
        let session = message.turn.session;
        let (claimed, put) = tokio::join!(
            self.conversations.claim_idle(context, message),
            self.index.put(session, record)
        );
        let claimed = match claimed {
            Ok(Some(claimed)) => claimed,
            Ok(None) => return Ok(None),
            Err(err) => {
                if put.is_ok() {
                    self.forget(session).await;
                }
                return Err(refusal(&err));
            }
        };
        // Claimed in the record: the turn runs (were it not sent here, the
        // router's keeper would send it), so a failed listing is tried once
        // more, then only logged: an error would have the caller send the
        // message again, and the turn would run twice.
        let sent = self.conversations.start_claimed(claimed).await;
        if put.is_err() {
            if let Err(err) = self.index.put(session, record).await {
                tracing::warn!(error = %err, %session, "a running turn's task is not listed");
            }
        }
        sent.map(Some).map_err(|err| refusal(&err))
    }

    /// Forgets task `session`, which did not start.
    async fn forget(&self, session: Uuid) {
        if let Err(forgot) = self.index.forget(session).await {
            tracing::warn!(error = %forgot, %session, "cannot forget a task that did not start");
        }
    }

    /// Sends `message` to conversation `context` (as it was `read`); a
    /// refused message's task is forgotten, and the refusal is the caller's
    /// error.
    async fn send_turn(
        &self,
        context: &str,
        message: &UserMessage,
        read: Option<(Conversation, u64)>,
    ) -> Result<baton_worker::conversation::Sent, JsonRpcError> {
        let session = message.turn.session;
        match self.conversations.send_after(context, message, read).await {
            Ok(sent) => Ok(sent),
            Err(err) => {
                // Refused: no task of it is listed.
                self.forget(session).await;
                Err(refusal(&err))
            }
        }
    }

    /// Settles conversation `context` in the background, now that its turn
    /// ended: its next message then finds it settled (the router's keeper
    /// would, a moment later).
    pub(crate) fn settle_soon(&self, context: &str) {
        let (conversations, context) = (self.conversations.clone(), context.to_owned());
        tokio::spawn(async move {
            if let Err(err) = conversations.settle_now(&context).await {
                tracing::warn!(error = %err, %context, "cannot settle the conversation now; the router's keeper will");
            }
        });
    }

    /// The session of conversation `context`'s running turn when an agent
    /// of it asked the user a question and waits for the answer; another
    /// caller's conversation is refused.
    async fn asking(
        &self,
        context: &str,
        caller: &Caller,
        read: Option<&(Conversation, u64)>,
    ) -> Result<Option<Uuid>, JsonRpcError> {
        let Some((record, _)) = read else {
            return Ok(None);
        };
        if !caller.owns(record.owner.as_deref()) {
            return Err(error(
                error_code::INVALID_PARAMS,
                format!("conversation {context} belongs to another caller"),
            ));
        }
        let question = self.conversations.question(record, &self.inbox).await;
        Ok(question
            .map_err(|err| internal(&err))?
            .map(|entry| entry.envelope.session))
    }
}

/// A conversation's refusal as the caller's error.
fn refusal(err: &baton_worker::conversation::ConversationError) -> JsonRpcError {
    match err.kind() {
        ConversationErrorKind::Busy => error(error_code::UNSUPPORTED_OPERATION, err.to_string()),
        ConversationErrorKind::Forbidden | ConversationErrorKind::Deleted => {
            error(error_code::INVALID_PARAMS, err.to_string())
        }
        _ => internal(err),
    }
}

//! A turn's task: the transcript so far and the user's message, for the
//! holder, under an id derived from the conversation and the turn (the
//! entry point sends it).

use baton_proto::{Conversation, Envelope, Event, Map, Message, Role, TurnOf};
use uuid::Uuid;

use super::Records;
use crate::error::Error;

/// The session whose end holds `record`'s whole conversation, when the
/// record was written before transcripts were logged: its next task is
/// built from that end ([`Records::task`]'s `legacy`).
pub fn legacy(record: &Conversation) -> Option<Uuid> {
    record
        .history
        .is_none()
        .then_some(record.transcript)
        .flatten()
}

impl Records {
    /// The task of `record`'s running turn `turn`: the transcript so far
    /// (a reference to it) and the message, to the holder (else the
    /// entry), under an id derived from the conversation and the turn, so
    /// it is sent once. `legacy` is the end of [`legacy`]'s session, for a
    /// record written before transcripts were logged. `None` when no turn
    /// runs.
    pub async fn task(
        &self,
        record: &Conversation,
        turn: u32,
        legacy: Option<Event>,
    ) -> Result<Option<Envelope>, Error> {
        let Some(running) = &record.running else {
            return Ok(None);
        };
        let mut envelope = Envelope::task(running.text.clone());
        envelope.id = record.task_id(turn);
        envelope.session = running.session;
        envelope.replayable = true;
        envelope.stream = running.stream;
        envelope.budget = running.budget;
        if let Some(history) = &record.history {
            if let Some(context) = &record.context {
                envelope.context = (**context).clone();
            }
            envelope.context.initial_query.clone_from(&running.text);
            envelope.context.problem.clear();
            envelope.context.history = Some(history.clone());
            envelope.context.messages = vec![Message::new(Role::User, running.text.clone())];
        } else if record.transcript.is_some() {
            // A record written before transcripts were logged: the last
            // turn's end holds the whole conversation.
            if let Some(context) = legacy.and_then(|end| end.context) {
                let mut context = *context;
                context.initial_query.clone_from(&running.text);
                context.problem.clear();
                envelope.context = context;
                envelope
                    .context
                    .messages
                    .push(Message::new(Role::User, running.text.clone()));
            }
        }
        // A turn that interrupted others runs with their messages first,
        // then what they did (each tool call with its result).
        let mut before = Vec::new();
        for text in &running.earlier {
            before.push(Message::new(Role::User, text.clone()));
        }
        for cut in &running.cut {
            before.extend(self.cut_short(record, *cut).await?);
        }
        let at = envelope.context.messages.len().saturating_sub(1);
        envelope.context.messages.splice(at..at, before);
        envelope.context.variables.extend(running.variables.clone());
        envelope.to = (record.holder.clone())
            .or_else(|| running.to.clone())
            .or_else(|| record.entry.clone());
        envelope.versions.clone_from(&record.versions);
        envelope.conversation = Some(TurnOf {
            id: record.id.clone(),
            turn,
            hand_back: false,
            extra: Map::new(),
        });
        Ok(Some(envelope))
    }
}

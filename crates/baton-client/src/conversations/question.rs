//! The question a conversation's running turn waits on: an agent of it
//! asked the user (`ask_user`), and the conversation's next message is the
//! answer, not a new turn. Found with one read of the turn's last event
//! and one keyed read of the inbox by session (`Inbox::question`), never a
//! listing.

use baton_proto::{Conversation, EventType, TurnMessage, Value};
use uuid::Uuid;

use crate::EventStream;

use super::Conversations;
use crate::inbox::{Decision, InboxEntry};
use baton_nats::{Error, ErrorKind};

impl Conversations {
    /// The inbox entry of the question `record`'s running turn waits on;
    /// `None` when no turn runs, or the running one does not wait for the
    /// user.
    pub(super) async fn question(
        &self,
        record: &Conversation,
    ) -> Result<Option<InboxEntry>, Error> {
        let Some(running) = &record.running else {
            return Ok(None);
        };
        // Only a turn whose last event is `waiting` may be asking: one read
        // before the inbox is.
        let last = (self.client.last_event(running.session).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the running turn", err)
        })?;
        if last.is_none_or(|event| event.kind != EventType::Waiting) {
            return Ok(None);
        }
        let inbox = self.inbox().await?;
        (inbox.question(running.session).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the question", err)
        })
    }

    /// Answers question `entry` with `said` (its text, and the variables
    /// that go with it to the agent that asked), as `person`: the session
    /// that goes on, its events before the answer, and, for a streamed
    /// answer (`said.stream`), its events after them, followed from before
    /// the answer is given (the pieces are only live).
    pub(super) async fn answer(
        &self,
        entry: &InboxEntry,
        said: &TurnMessage,
        person: &str,
    ) -> Result<(Uuid, crate::Seen, Option<EventStream>), Error> {
        let session = entry.envelope.session;
        // Its events so far end with the question.
        let seen = (self.client.history(session).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the asking turn", err)
        })?;
        let seen = crate::Seen::of(&seen);
        let early = if said.stream {
            let events =
                (self.client.follow_after(session, seen.clone()).await).map_err(|err| {
                    Error::with_source(ErrorKind::JetStream, "cannot follow the turn", err)
                })?;
            Some(events)
        } else {
            None
        };
        let answer = Decision::Answer(said.text.clone());
        let id = entry.envelope.id.to_string();
        let inbox = self.inbox().await?;
        let variables = (!said.variables.is_empty()).then(|| {
            let entries = said.variables.iter();
            Value::Map(
                entries
                    .map(|(k, v)| (Value::from(k.as_str()), v.clone()))
                    .collect(),
            )
        });
        (inbox.resolve_with(&id, answer, person, variables).await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot answer the question", err)
        })?;
        Ok((session, seen, early))
    }
}

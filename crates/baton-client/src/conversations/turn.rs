//! A message said to a conversation, as its turn goes: what became of it
//! ([`Taken`]), and the turn's events up to its end or to an agent's
//! question. A turn's end is settled here, in one place: its
//! conversation's running turn is closed before the end is given, so
//! whatever reads the conversation next finds who holds it. A turn that
//! nobody follows to its end is closed by the router's keeper.

use baton_proto::{Event, EventType};
use futures::StreamExt;
use uuid::Uuid;

use super::{Conversations, Taken};
use crate::client::EventStream;
use baton_nats::{Error, ErrorKind};

/// A message said to a conversation ([`Conversations::say`]).
pub struct Turn {
    /// What became of the message.
    pub taken: Taken,
    id: String,
    conversations: Conversations,
    /// Followed before the message was sent (or, for an answer, given),
    /// when its answer streams: the pieces are only live.
    early: Option<EventStream>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("taken", &self.taken)
            .field("conversation", &self.id)
            .finish_non_exhaustive()
    }
}

impl Conversations {
    /// The running turn `session` of conversation `id`, answered another
    /// way than by [`Conversations::say`] (an A2A message naming its task,
    /// answered through the inbox): its events past `seen`, those before
    /// the answer, which close the turn at its end as a said message's do.
    #[must_use]
    pub fn answered_turn(&self, id: &str, session: Uuid, seen: crate::Seen) -> Turn {
        Turn::new(self, id, Taken::Answered { session, seen }, None)
    }
}

impl Turn {
    pub(super) fn new(
        conversations: &Conversations,
        id: &str,
        taken: Taken,
        early: Option<EventStream>,
    ) -> Self {
        Self {
            taken,
            id: id.to_owned(),
            conversations: conversations.clone(),
            early,
        }
    }

    /// The session that answers the message (see [`Taken::session`]).
    #[must_use]
    pub fn session(&self) -> Uuid {
        self.taken.session()
    }

    /// The turn's events, up to its end or to a question (a `waiting`
    /// event): the session that answers the message, or, for an answer to
    /// a question, the asking session's events after it. The end comes
    /// once the conversation's turn is closed.
    ///
    /// # Errors
    ///
    /// When the session's events cannot be read.
    pub async fn events(self) -> Result<EventStream, Error> {
        let client = &self.conversations.client;
        let events = match (&self.taken, self.early) {
            (_, Some(early)) => Ok(early),
            (Taken::Answered { session, seen }, None) => {
                client.follow_after(*session, seen.clone()).await
            }
            (taken, None) => client.follow_to_rest(taken.session()).await,
        };
        let events = events.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot follow the turn", err)
        })?;
        // Only the end closes the turn: the other events (a streamed
        // answer's many pieces) pass with one check.
        let closing = std::sync::Arc::new((self.conversations, self.id));
        Ok(Box::pin(events.then(move |item| {
            let ends = matches!(&item, Ok(event) if event.kind.is_terminal());
            let closing = ends.then(|| std::sync::Arc::clone(&closing));
            async move {
                if let Some(closing) = closing {
                    let (conversations, id) = &*closing;
                    // A failure is logged there; the keeper closes it later.
                    let _closed = conversations.turn_ended(id).await;
                }
                item
            }
        })))
    }
}

/// What an agent asked the user, that its turn waits on: the next message
/// to the conversation answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The asking session.
    pub session: Uuid,
    /// What the agent asked (its last message).
    pub text: String,
    /// The hop that waits (the inbox entry's id).
    pub envelope: Option<Uuid>,
}

impl Question {
    /// The question a `waiting` event asks; `None` for any other event.
    #[must_use]
    pub fn of(event: &Event) -> Option<Self> {
        (event.kind == EventType::Waiting).then(|| Self {
            session: event.session,
            text: event.detail.clone().unwrap_or_default(),
            envelope: event.envelope,
        })
    }
}

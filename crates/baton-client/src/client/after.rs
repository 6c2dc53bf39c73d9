//! Following a session on from what a reader has already seen: the
//! answer to a question an agent asked goes on in the asking session, and
//! its follower shows only what comes after the answer.

use std::collections::HashSet;
use std::sync::Arc;

use baton_proto::{Event, EventType};
use futures::StreamExt;
use uuid::Uuid;

use super::{Client, EventStream};
use baton_nats::Error;

/// The events of a session that a reader has already seen, by identity.
/// A follower skips them by id, not by count: live events (the pieces of a
/// streamed answer) may reach it before the stored ones are read, so a
/// count would skip the wrong events.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    ids: Arc<HashSet<Uuid>>,
}

impl Seen {
    /// The events `events` (a session's history, as read).
    #[must_use]
    pub fn of(events: &[Event]) -> Self {
        Self {
            ids: Arc::new(events.iter().map(|event| event.id).collect()),
        }
    }

    /// Whether nothing was seen: a follower starts from the beginning.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// How many events were seen.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether `event` was seen.
    #[must_use]
    pub fn contains(&self, event: &Event) -> bool {
        self.ids.contains(&event.id)
    }
}

impl Client {
    /// The events of `session` up to where it rests, as
    /// [`Client::follow_to_rest`], less those in `seen`.
    ///
    /// # Errors
    ///
    /// When the events stream cannot be read.
    pub async fn follow_after(&self, session: Uuid, seen: Seen) -> Result<EventStream, Error> {
        if seen.is_empty() {
            return self.follow_to_rest(session).await;
        }
        let tracked = self.tracked_events(session).await?;
        // The question it saw is no place to rest: the answer goes on from
        // there. An end it saw is (a session that had ended).
        let past = seen.clone();
        let events = super::follow::until(tracked, move |event| {
            event.kind.is_terminal() || (event.kind == EventType::Waiting && !past.contains(event))
        });
        Ok(Box::pin(events.filter(move |item| {
            let old = matches!(item, Ok(event) if seen.contains(event));
            std::future::ready(!old)
        })))
    }
}

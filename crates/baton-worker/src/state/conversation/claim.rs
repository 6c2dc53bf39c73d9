//! A message to an idle conversation whose record this process stored
//! last: its turn is claimed from the record as stored, with one
//! compare-and-swap and no read first. The swap proves the copy current;
//! when it is not (another process wrote since), nothing is claimed, and
//! the caller sends the message the usual way, which reads the record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use baton_proto::Conversation;

use super::settle::begin;
use super::{ConversationError, Conversations, Sent, UserMessage, owned};

/// How many records a process keeps; past it, it forgets them all.
const KEPT: usize = 1024;

/// The records this process stored last, with their revisions, by key.
#[derive(Clone, Default)]
pub(super) struct Stored(Arc<Mutex<HashMap<String, (Conversation, u64)>>>);

impl Stored {
    /// Keeps `record`, just stored at `revision`.
    pub(super) fn keep(&self, key: &str, record: Conversation, revision: u64) {
        let mut stored = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if stored.len() >= KEPT && !stored.contains_key(key) {
            stored.clear();
        }
        stored.insert(key.to_owned(), (record, revision));
    }

    /// Forgets the record at `key` (deleted).
    pub(super) fn forget(&self, key: &str) {
        let mut stored = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        stored.remove(key);
    }

    /// The record stored last at `key`, when no turn runs or waits there.
    fn idle(&self, key: &str) -> Option<(Conversation, u64)> {
        let stored = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        stored
            .get(key)
            .filter(|(record, _)| record.running.is_none() && record.queue.is_empty())
            .cloned()
    }
}

/// A turn claimed in its conversation's record, its task not sent yet:
/// [`Conversations::start_claimed`] sends it.
#[derive(Debug)]
#[must_use = "a claimed turn runs only once it is started"]
pub struct Claimed {
    record: Conversation,
    sent: Sent,
}

impl Conversations {
    /// Claims the next turn of conversation `id` for `message` when this
    /// process stored the record last and no turn runs or waits there: one
    /// write, no read. `None` when it did not, or another process wrote
    /// since: then [`Conversations::send`] it.
    ///
    /// # Errors
    ///
    /// [`super::ConversationErrorKind::Forbidden`] for another caller's
    /// conversation; [`super::ConversationErrorKind::Store`] when JetStream
    /// fails.
    pub async fn claim_idle(
        &self,
        id: &str,
        message: &UserMessage,
    ) -> Result<Option<Claimed>, ConversationError> {
        let key = Conversation::key_of(id);
        let Some((mut record, revision)) = self.records.idle(&key) else {
            return Ok(None);
        };
        owned(id, &record, &message.caller)?;
        let mut started = false;
        let sent = begin(&mut record, message.turn.clone(), &mut started);
        if !self.swap(&key, &record, revision).await? {
            tracing::debug!(
                conversation = id,
                "changed since this process stored it; reading it"
            );
            return Ok(None);
        }
        Ok(Some(Claimed { record, sent }))
    }

    /// Sends the task of a turn [`Conversations::claim_idle`] claimed.
    ///
    /// # Errors
    ///
    /// When the task cannot be published (the router's keeper sends it
    /// later, under the same id).
    pub async fn start_claimed(&self, claimed: Claimed) -> Result<Sent, ConversationError> {
        let Claimed { record, sent } = claimed;
        self.start(&record, record.turns).await?;
        self.note_sent_later(Conversation::key_of(&record.id), record.turns);
        Ok(sent)
    }
}

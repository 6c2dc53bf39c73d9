//! The fast path of a message to an idle conversation: the record this
//! process stored last is claimed without reading it first. The swap
//! proves the copy current; when it is not (another process wrote since),
//! nothing is claimed, and the entry point reads the record the usual way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use baton_proto::{Conversation, TurnMessage};

use super::closing::begin;
use super::{Records, owned};
use crate::error::Error;

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

/// An idle conversation's record as this process stored it last, ready to
/// be claimed ([`Records::claim`]): no read was needed to find it.
#[derive(Debug)]
pub struct Idle {
    record: Conversation,
    revision: u64,
}

impl Records {
    /// The record of conversation `id` when this process stored it last
    /// and no turn runs or waits there (no I/O: from memory).
    pub fn idle(&self, id: &str) -> Option<Idle> {
        let (record, revision) = self.records.idle(&Conversation::key_of(id))?;
        Some(Idle { record, revision })
    }

    /// Claims the next turn of `idle`'s conversation for `turn`, sent by
    /// `caller`: one write, no read. The record with its running turn, or
    /// `None` when another process wrote since (then read it).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotOwner`](crate::ErrorKind::NotOwner) for another caller's
    /// conversation; [`super::ErrorKind::JetStream`] when JetStream
    /// fails.
    pub async fn claim(
        &self,
        idle: Idle,
        turn: TurnMessage,
        caller: &Option<String>,
    ) -> Result<Option<Conversation>, Error> {
        let Idle {
            mut record,
            revision,
        } = idle;
        owned(&record.id, &record, caller)?;
        begin(&mut record, turn);
        if !self
            .swap(&Conversation::key_of(&record.id), &record, revision)
            .await?
        {
            tracing::debug!(
                conversation = record.id,
                "changed since this process stored it; reading it"
            );
            return Ok(None);
        }
        Ok(Some(record))
    }
}

//! Conversations read as a whole: every record in the bucket, one
//! conversation's turns in order (each listed beside the record when it is
//! settled), and the question its running turn waits on.

use async_nats::jetstream::kv;
use baton_proto::{Conversation, ConversationTurn, EventType, Reason};
use futures::{StreamExt, TryStreamExt};

use super::{ConversationError, Conversations};
use crate::clients::inbox::{Inbox, InboxEntry};

/// How many entries a listing reads at once.
const AT_ONCE: usize = 16;

impl Conversations {
    /// Lists ended turn `turn` of conversation `id` beside its record
    /// (whoever settles the turn writes the same entry).
    pub(super) async fn list_turn(
        &self,
        id: &str,
        turn: &ConversationTurn,
    ) -> Result<(), ConversationError> {
        let bytes = rmp_serde::to_vec_named(turn)
            .map_err(|err| ConversationError::store(format!("cannot encode a turn: {err}")))?;
        self.store
            .put(Conversation::turn_key(id, turn.turn), bytes.into())
            .await
            .map_err(|err| {
                ConversationError::store(format!("cannot list turn {}: {err}", turn.turn))
            })?;
        Ok(())
    }

    /// Every conversation's record, most recently updated first.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be listed or read.
    pub async fn list(&self) -> Result<Vec<Conversation>, ConversationError> {
        let keys: Vec<String> = self
            .store
            .keys()
            .await
            .map_err(|err| ConversationError::store(format!("cannot list: {err}")))?
            .try_filter(|key| std::future::ready(key.starts_with("c.")))
            .try_collect()
            .await
            .map_err(|err| ConversationError::store(format!("cannot list: {err}")))?;
        let mut all: Vec<Conversation> = futures::stream::iter(keys)
            .map(|key| async move {
                match self.read(&key).await {
                    // Deleted since it was listed.
                    Err(err) if err.kind() == super::ConversationErrorKind::Deleted => Ok(None),
                    read => read,
                }
            })
            .buffer_unordered(AT_ONCE)
            .try_filter_map(|read| std::future::ready(Ok(read.map(|(record, _)| record))))
            .try_collect()
            .await?;
        all.sort_by_key(|record| std::cmp::Reverse(record.updated_at));
        Ok(all)
    }

    /// The turns of `record` that ended, in order (the running turn, and
    /// one whose entry expired, are left out).
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read.
    pub async fn turns(
        &self,
        record: &Conversation,
    ) -> Result<Vec<ConversationTurn>, ConversationError> {
        let keys = (1..=record.turns).map(|turn| Conversation::turn_key(&record.id, turn));
        futures::stream::iter(keys)
            .map(|key| async move {
                let entry =
                    self.store.entry(key.as_str()).await.map_err(|err| {
                        ConversationError::store(format!("cannot read {key}: {err}"))
                    })?;
                let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                    return Ok(None);
                };
                rmp_serde::from_slice(&entry.value)
                    .map(Some)
                    .map_err(|err| ConversationError::store(format!("{key} is not a turn: {err}")))
            })
            .buffered(AT_ONCE)
            .try_filter_map(|turn| std::future::ready(Ok(turn)))
            .try_collect()
            .await
    }

    /// The question `record`'s running turn waits on: the inbox entry of
    /// an agent that asked the user (`ask_user`). The next message to the
    /// conversation is its answer, not a new turn. `None` when no turn runs,
    /// or the running one does not wait for the user.
    ///
    /// # Errors
    ///
    /// When the session or the inbox cannot be read.
    pub async fn question(
        &self,
        record: &Conversation,
        inbox: &Inbox,
    ) -> Result<Option<InboxEntry>, ConversationError> {
        let Some(running) = &record.running else {
            return Ok(None);
        };
        // Only a turn whose last event is `waiting` may be asking: one read
        // before the inbox is listed.
        let last = self
            .client
            .last_event(running.session)
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        if last.is_none_or(|event| event.kind != EventType::Waiting) {
            return Ok(None);
        }
        let entries = inbox
            .list()
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        Ok(entries.into_iter().find(|entry| {
            entry.envelope.session == running.session
                && entry
                    .gate()
                    .is_some_and(|gate| gate.reason == Reason::InputRequired)
        }))
    }

    /// Answers the question `record`'s running turn waits on (see
    /// [`Conversations::question`]) with `text`, as `person`: the session
    /// that goes on, and how many of its events came before the answer (a
    /// follower skips them). `None` when no question waits.
    ///
    /// # Errors
    ///
    /// When the session or the inbox cannot be read, or the answer is
    /// refused (answered already, say).
    pub async fn answer(
        &self,
        record: &Conversation,
        inbox: &Inbox,
        text: &str,
        person: &str,
    ) -> Result<Option<(uuid::Uuid, usize)>, ConversationError> {
        let Some(entry) = self.question(record, inbox).await? else {
            return Ok(None);
        };
        let session = entry.envelope.session;
        let store = |err: &dyn std::fmt::Display| ConversationError::store(err.to_string());
        // Its events so far end with the question.
        let seen = self.client.history(session).await.map_err(|e| store(&e))?;
        let answer = crate::clients::inbox::Decision::Answer(text.to_owned());
        let id = entry.envelope.id.to_string();
        inbox
            .resolve(&id, answer, person)
            .await
            .map_err(|e| store(&e))?;
        Ok(Some((session, seen.len())))
    }
}

//! Conversations read as a whole: every record in the bucket, and one
//! conversation's turns in order (each listed beside the record when it is
//! closed).

use async_nats::jetstream::kv;
use baton_proto::{Conversation, ConversationTurn, Role};
use futures::{StreamExt, TryStreamExt};

use super::Records;
use crate::error::{Error, ErrorKind};

/// How many entries a listing reads at once.
const AT_ONCE: usize = 16;

impl Records {
    /// `turn` with its user's text put back from the transcript, when its
    /// listing refers to it there. A transcript that no longer holds it
    /// (gone, or cut short) leaves the text empty, with a warning.
    async fn said(&self, id: &str, mut turn: ConversationTurn) -> ConversationTurn {
        let Some(at) = turn.text_at.filter(|_| turn.text.is_empty()) else {
            return turn;
        };
        match self.transcripts.message(id, at.entry, at.message).await {
            Ok(Some(message)) if message.role == Role::User => {
                turn.text = message.content;
                turn.text_at = None;
            }
            read => tracing::warn!(
                conversation = id, turn = turn.turn, entry = at.entry, message = at.message,
                read = ?read.map(|message| message.map(|m| m.role)),
                "the transcript no longer holds the turn's text"
            ),
        }
        turn
    }

    /// Lists ended turn `turn` of conversation `id` beside its record
    /// (whoever closes the turn writes the same entry).
    pub(crate) async fn list_turn(&self, id: &str, turn: &ConversationTurn) -> Result<(), Error> {
        let bytes = rmp_serde::to_vec_named(turn)
            .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode a turn", err))?;
        self.store
            .put(Conversation::turn_key(id, turn.turn), bytes.into())
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot list turn {}", turn.turn),
                    err,
                )
            })?;
        Ok(())
    }

    /// Every conversation's record, most recently updated first.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be listed or read.
    pub async fn list(&self) -> Result<Vec<Conversation>, Error> {
        let keys: Vec<String> = self
            .store
            .keys()
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot list the conversations", err)
            })?
            .try_filter(|key| std::future::ready(key.starts_with("c.")))
            .try_collect()
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot list the conversations", err)
            })?;
        let mut all: Vec<Conversation> = futures::stream::iter(keys)
            .map(|key| async move {
                match self.read(&key).await {
                    // Deleted since it was listed.
                    Err(err) if err.kind() == super::ErrorKind::Deleted => Ok(None),
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
    /// one whose entry expired, are left out), each with its text, read
    /// from the transcript when its listing refers to it there.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read.
    pub async fn turns(&self, record: &Conversation) -> Result<Vec<ConversationTurn>, Error> {
        let keys = (1..=record.turns).map(|turn| Conversation::turn_key(&record.id, turn));
        futures::stream::iter(keys)
            .map(|key| async move {
                let entry = self.store.entry(key.as_str()).await.map_err(|err| {
                    Error::with_source(ErrorKind::JetStream, format!("cannot read {key}"), err)
                })?;
                let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
                    return Ok(None);
                };
                let turn: ConversationTurn =
                    rmp_serde::from_slice(&entry.value).map_err(|err| {
                        Error::with_source(
                            ErrorKind::JetStream,
                            format!("{key} is not a turn"),
                            err,
                        )
                    })?;
                Ok(Some(self.said(&record.id, turn).await))
            })
            .buffered(AT_ONCE)
            .try_filter_map(|turn| std::future::ready(Ok(turn)))
            .try_collect()
            .await
    }
}

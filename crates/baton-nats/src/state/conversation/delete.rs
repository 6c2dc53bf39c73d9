//! Deleting a conversation: its turns' events, its transcript, its listed
//! turns, and its record, which leaves a marker behind, so a later read or
//! turn of that id is refused as deleted rather than starting afresh.

use async_nats::jetstream::kv;
use baton_proto::footprint::{Footprint, api};
use baton_proto::{Conversation, Subjects};

use super::Records;
use crate::error::{Error, ErrorKind};

impl Records {
    /// Deletes conversation `id`: its record (leaving the marker), then
    /// the events of every turn it listed, the listed turns, and its
    /// transcript's entries. Returns how many sessions' events it removed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] while a turn runs;
    /// [`ErrorKind::Deleted`] when there is no such conversation;
    /// [`ErrorKind::JetStream`] when JetStream refuses a step.
    pub async fn delete(&self, id: &str) -> Result<usize, Error> {
        let key = Conversation::key_of(id);
        let Some((record, revision)) = self.read(&key).await? else {
            return Err(Error::new(
                ErrorKind::Deleted,
                format!("no conversation {id}"),
            ));
        };
        if let Some(running) = &record.running {
            return Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "conversation {id} runs turn {} as session {}: wait for it to end, or cancel it (`baton cancel {}`), then delete",
                    record.turns, running.session, running.session
                ),
            ));
        }
        self.remove(&key, &record, revision).await
    }

    /// Removes conversation `record` (at `key`, `revision`) as deleting
    /// does: its record becomes the marker (only if nobody started a turn
    /// meanwhile), then its turns' events, its listed turns and its
    /// transcript go. Returns how many sessions' events it removed.
    pub(crate) async fn remove(
        &self,
        key: &str,
        record: &Conversation,
        revision: u64,
    ) -> Result<usize, Error> {
        let id = &record.id;
        let turns = self.turns(record).await?;
        let mut sessions: Vec<uuid::Uuid> = turns.iter().map(|turn| turn.session).collect();
        sessions.extend(record.transcript);
        sessions.sort_unstable();
        sessions.dedup();
        let failed = |err: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::JetStream,
                format!("cannot delete conversation {id}: {err}"),
            )
        };
        // The marker first, only if nobody started a turn meanwhile: from
        // now on no turn reads the transcript that goes next.
        self.store
            .delete_expect_revision(key, Some(revision))
            .await
            .map_err(|err| failed(&err))?;
        self.records.forget(key);
        let left = |err: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::JetStream,
                format!(
                    "conversation {id} is deleted, but not all of its turns' events and entries could be removed ({err}); the router removes the rest when the marker expires"
                ),
            )
        };
        let subjects = &self.subjects;
        let events = (self.jetstream)
            .get_stream_no_info(subjects.events_stream())
            .await
            .map_err(|err| left(&err))?;
        for session in &sessions {
            events
                .purge()
                .filter(subjects.events(*session))
                .await
                .map_err(|err| left(&err))?;
        }
        self.clear(key).await.map_err(|err| left(&err))?;
        Ok(sessions.len())
    }

    /// Removes what is kept beside the record at `key`: its listed turns
    /// and its transcript, each with one purge that leaves nothing behind.
    pub(crate) async fn clear(&self, key: &str) -> Result<(), Error> {
        let hex = key.trim_start_matches("c.");
        self.purge_subjects(&format!("t.{hex}.>")).await?;
        self.transcripts.purge_hex(hex).await.map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot purge the transcript of {key}"),
                err,
            )
        })
    }

    /// Purges the bucket's keys matching `keys` from its stream.
    pub(crate) async fn purge_subjects(&self, keys: &str) -> Result<(), Error> {
        let bucket = self.subjects.conversations_bucket();
        crate::nats::provision::purge_keys(&self.jetstream, &bucket, keys)
            .await
            .map_err(|err| Error::new(ErrorKind::JetStream, err.to_string()))
    }
}

/// Whether `entry` is a deleted conversation's marker.
pub(super) fn deleted(entry: &kv::Entry) -> bool {
    entry.operation == kv::Operation::Delete
}

/// What deleting and expiring conversations use beyond the bucket:
/// purging their turns' events from the events stream, their listed turns
/// from the bucket's stream, and their transcripts.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    Footprint::new()
        .publishes([
            api(format_args!("STREAM.PURGE.{}", subjects.events_stream())),
            api(format_args!(
                "STREAM.PURGE.KV_{}",
                subjects.conversations_bucket()
            )),
        ])
        .with(crate::state::transcript::purging_footprint(subjects))
}

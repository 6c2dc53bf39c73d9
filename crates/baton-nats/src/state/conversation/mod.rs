//! Conversations' records: many turns, one memory, one turn at a time.
//!
//! A conversation's record ([`Conversation`]) lives in the key-value bucket
//! `BATON_CONVERSATIONS`, and every change to it is a compare-and-swap on
//! its revision: two gateways, or a gateway and the router's keeper, never
//! both advance it. This room keeps the record-level code ([`Records`]):
//! reading and swapping records, the claim cache of an idle conversation,
//! a turn's beginning and end (`begin`, `ended`, `transcribe`), the listed
//! turns, deleting, expiry, forking, and the task a turn sends. It names
//! nothing above `state`: reading sessions, sending tasks and answering
//! questions is the entry point's (`baton-client`'s `conversations/`),
//! which calls in here with what it read.

use crate::error::{Error, ErrorKind};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::footprint::Footprint;
use baton_proto::{Conversation, Subjects};

use crate::nats::claimcheck::ClaimCheck;

mod claim;
mod closing;
mod cut;
mod delete;
mod expiry;
mod fork;
mod listing;
mod turn;

pub use closing::begin;
pub use turn::legacy;

pub use cut::INTERRUPTED;

pub use delete::footprint as deleting_footprint;

/// The conversations' records of one deployment: their bucket, with the
/// transcripts beside them, and what this process stored last.
#[derive(Clone)]
pub struct Records {
    store: kv::Store,
    jetstream: jetstream::Context,
    subjects: Subjects,
    /// Large parts of hop journals are read back through it.
    claims: Arc<ClaimCheck>,
    /// The conversations' transcripts, in the same bucket.
    transcripts: crate::state::transcript::Transcripts,
    /// The records this process stored last, with their revisions, by key:
    /// a message to an idle conversation claims its turn from here.
    records: claim::Stored,
}

/// How long an idle conversation is kept by default, from its last change.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long after it was stored a running turn not noted as sent is sent
/// by the keeper (its starter may have stopped before sending it).
pub const SILENT: Duration = Duration::from_secs(10);

impl Records {
    /// Opens the bucket (creating it with `replicas` when missing).
    pub async fn open(
        jetstream: &jetstream::Context,
        subjects: &Subjects,
        claims: Arc<ClaimCheck>,
        replicas: usize,
    ) -> Result<Self, Error> {
        let store = crate::state::Bucket::Conversations
            .open(jetstream, subjects, replicas)
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot open the conversations", err)
            })?;
        let transcripts =
            crate::state::transcript::Transcripts::open(jetstream.clone(), subjects, replicas)
                .await
                .map_err(|err| {
                    Error::with_source(ErrorKind::JetStream, "cannot open the transcripts", err)
                })?;
        Ok(Self {
            store,
            jetstream: jetstream.clone(),
            subjects: subjects.clone(),
            claims,
            transcripts,
            records: claim::Stored::default(),
        })
    }

    /// The bucket's watch of every record, from each key's last (the
    /// keeper follows it).
    pub async fn watch(&self) -> Result<kv::Watch, Error> {
        // The records only, not the turns listed beside them.
        (self.store.watch_with_history("c.>").await).map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot watch the conversations", err)
        })
    }

    /// Conversation `id`'s record and its revision, if it exists.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read, or holds no record there.
    pub async fn get(&self, id: &str) -> Result<Option<(Conversation, u64)>, Error> {
        self.read(&Conversation::key_of(id)).await
    }

    pub async fn read(&self, key: &str) -> Result<Option<(Conversation, u64)>, Error> {
        let entry = self.store.entry(key).await.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, format!("cannot read {key}"), err)
        })?;
        if entry.as_ref().is_some_and(delete::deleted) {
            return Err(Error::new(
                ErrorKind::Deleted,
                "this conversation was deleted (`baton conversations delete`); send with another id to start a new one",
            ));
        }
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let record = rmp_serde::from_slice(&entry.value).map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("{key} is not a conversation"),
                err,
            )
        })?;
        Ok(Some((record, entry.revision)))
    }

    /// Notes in the record that running turn `turn`'s task was published,
    /// so the keeper does not send it again; a record that moved on since
    /// is left as it is.
    pub async fn mark_sent(&self, key: &str, turn: u32) -> Result<(), Error> {
        loop {
            let Some((mut record, revision)) = self.read(key).await? else {
                return Ok(());
            };
            match record.running.as_mut() {
                Some(running) if record.turns == turn && !running.sent => running.sent = true,
                _ => return Ok(()),
            }
            if self.swap(key, &record, revision).await? {
                return Ok(());
            }
        }
    }

    /// Stores `record` over `revision` (0: creates it); `false` when
    /// another writer came first.
    pub async fn swap(
        &self,
        key: &str,
        record: &Conversation,
        revision: u64,
    ) -> Result<bool, Error> {
        let mut record = record.clone();
        record.updated_at = baton_proto::now_ms();
        let bytes = rmp_serde::to_vec_named(&record).map_err(|err| {
            Error::with_source(ErrorKind::Encode, format!("cannot encode {key}"), err)
        })?;
        let failed = |err: Box<dyn std::error::Error + Send + Sync>| {
            Error::with_source(ErrorKind::JetStream, format!("cannot store {key}"), err)
        };
        let stored = if revision == 0 {
            match self.store.create(key, bytes.into()).await {
                Ok(revision) => revision,
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => return Ok(false),
                Err(err) => {
                    return Err(failed(Box::<dyn std::error::Error + Send + Sync>::from(
                        err,
                    )));
                }
            }
        } else {
            match self.store.update(key, bytes.into(), revision).await {
                Ok(revision) => revision,
                Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    return Ok(false);
                }
                Err(err) => {
                    return Err(failed(Box::<dyn std::error::Error + Send + Sync>::from(
                        err,
                    )));
                }
            }
        };
        self.records.keep(key, record, stored);
        Ok(true)
    }
}

/// Refuses `caller` conversation `id` when `record` belongs to another
/// caller.
pub fn owned(id: &str, record: &Conversation, caller: &Option<String>) -> Result<(), Error> {
    if record.owner.is_some() && record.owner != *caller {
        return Err(Error::new(
            ErrorKind::NotOwner,
            format!("conversation {id} belongs to another caller"),
        ));
    }
    Ok(())
}

/// What conversations use: their bucket, read and written with
/// compare-and-swap, and listed by the router's keeper; and the subjects of
/// the agent types their turns go to.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    let bucket = subjects.conversations_bucket();
    Footprint::kv(&bucket)
        .with(Footprint::kv_watcher(&bucket))
        .with(Footprint::kv(&subjects.transcripts_bucket()))
        // An interrupted turn's tool calls are read from the hop journal.
        .with(Footprint::kv(&subjects.journal_bucket()))
        .with(crate::nats::events::footprint(subjects))
        // A turn goes past the router, to the agent type that holds it,
        // after reading the router's defaults and whether it is served.
        .with(crate::nats::served::footprint(subjects))
        .publishes([format!("{}.agent.*", subjects.prefix())])
        .noting(
            "a conversation's turn goes straight to the agent type that holds it, which may be any",
        )
}

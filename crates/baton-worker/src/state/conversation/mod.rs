//! Conversations: many turns, one memory, one turn at a time.
//!
//! A conversation's record ([`Conversation`]) lives in the key-value bucket
//! `BATON_CONVERSATIONS`, and every change to it is a compare-and-swap on
//! its revision: two gateways, or a gateway and the router's keeper, never
//! both advance it. A user message ([`Conversations::send`]) starts the next
//! turn, a session whose task goes to the agent that holds the conversation
//! with the transcript so far; or, while a turn runs, it waits in the
//! record's queue (or is refused, by the caller's [`Overlap`]). When a turn
//! ends, whoever sees it first settles the record: the agent that answered
//! holds the conversation, the ended session's context is the transcript,
//! and the next queued message starts. The router runs [`keep`], which
//! settles turns nobody else is sending to, and sends again a turn whose
//! starter crashed before its task was durable.

use std::time::Duration;

use async_nats::jetstream::kv;
use baton_proto::footprint::Footprint;
use baton_proto::{Conversation, Overlap, Subjects, TurnMessage};
use uuid::Uuid;

use crate::clients::client::Client;

mod claim;
mod cut;
mod delete;
mod expiry;
mod fork;
mod keeper;
mod listing;
mod settle;
mod turn;

use settle::begin;

pub use claim::Claimed;
pub use cut::INTERRUPTED;

pub use delete::footprint as deleting_footprint;
pub use keeper::keep;

/// Why a conversation operation failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConversationError {
    kind: ConversationErrorKind,
    message: String,
}

/// What kind of failure a [`ConversationError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConversationErrorKind {
    /// A turn runs, and the caller asked for `reject`.
    Busy,
    /// The conversation belongs to another caller.
    Forbidden,
    /// The conversation was deleted (or, to delete, does not exist).
    Deleted,
    /// JetStream did not answer as it should.
    Store,
}

impl ConversationError {
    fn new(kind: ConversationErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    fn store(message: impl Into<String>) -> Self {
        Self::new(ConversationErrorKind::Store, message)
    }

    /// What kind of failure it is.
    #[must_use]
    pub fn kind(&self) -> ConversationErrorKind {
        self.kind
    }
}

/// What became of a user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// It started turn `turn`, which runs as `session`.
    Started {
        /// The turn's session.
        session: Uuid,
        /// The turn, from 1.
        turn: u32,
    },
    /// It waits behind the running turn (and `ahead` others); it will run as
    /// `session`.
    Queued {
        /// The session it will run as.
        session: Uuid,
        /// Messages queued before it.
        ahead: usize,
    },
}

impl Sent {
    /// The session the message runs (or will run) as.
    #[must_use]
    pub fn session(&self) -> Uuid {
        match self {
            Self::Started { session, .. } | Self::Queued { session, .. } => *session,
        }
    }
}

/// A user message for [`Conversations::send`].
#[derive(Debug, Clone)]
pub struct UserMessage {
    /// The turn it starts, as it waits and runs: its session, text,
    /// variables, addressee, streaming and budget.
    pub turn: TurnMessage,
    /// Who sends it (the conversation's owner, when it starts one).
    pub caller: Option<String>,
    /// What happens when a turn runs.
    pub overlap: Overlap,
}

impl UserMessage {
    /// A message with `text`, to run as a new session, queued behind a
    /// running turn.
    #[must_use]
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            turn: TurnMessage::new(text),
            caller: None,
            overlap: Overlap::Enqueue,
        }
    }
}

/// The conversations of one deployment.
#[derive(Clone)]
pub struct Conversations {
    store: kv::Store,
    client: Client,
    /// The conversations' transcripts, in the same bucket.
    transcripts: crate::state::transcript::Transcripts,
    /// The records this process stored last, with their revisions, by key:
    /// a message to an idle conversation claims its turn from here.
    records: claim::Stored,
}

impl std::fmt::Debug for Conversations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversations").finish_non_exhaustive()
    }
}

/// How long an idle conversation is kept by default, from its last change.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long after it was stored a running turn not noted as sent is sent
/// by the keeper (its starter may have stopped before sending it).
const SILENT: Duration = Duration::from_secs(10);

/// How long after sending a turn's task its starter notes it as sent: well
/// within [`SILENT`], and after most turns ended.
const NOTED_AFTER: Duration = Duration::from_secs(2);

impl Conversations {
    /// Opens the bucket (creating it with `replicas` when missing); turns
    /// are sent and read through `client`.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub async fn open(client: Client, replicas: usize) -> Result<Self, ConversationError> {
        let store = crate::state::Bucket::Conversations
            .open(client.jetstream(), client.subjects(), replicas)
            .await
            .map_err(|err| ConversationError::store(err.to_string()))?;
        let transcripts = crate::state::transcript::Transcripts::open(
            client.jetstream().clone(),
            client.subjects(),
            replicas,
        )
        .await
        .map_err(|err| ConversationError::store(err.to_string()))?;
        Ok(Self {
            store,
            client,
            transcripts,
            records: claim::Stored::default(),
        })
    }

    /// Conversation `id`'s record and its revision, if it exists.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read, or holds no record there.
    pub async fn get(&self, id: &str) -> Result<Option<(Conversation, u64)>, ConversationError> {
        self.read(&Conversation::key_of(id)).await
    }

    async fn read(&self, key: &str) -> Result<Option<(Conversation, u64)>, ConversationError> {
        let entry = self
            .store
            .entry(key)
            .await
            .map_err(|err| ConversationError::store(format!("cannot read {key}: {err}")))?;
        if entry.as_ref().is_some_and(delete::deleted) {
            return Err(ConversationError::new(
                ConversationErrorKind::Deleted,
                "this conversation was deleted (`baton conversations delete`); send with another id to start a new one",
            ));
        }
        let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
            return Ok(None);
        };
        let record = rmp_serde::from_slice(&entry.value).map_err(|err| {
            ConversationError::store(format!("{key} is not a conversation: {err}"))
        })?;
        Ok(Some((record, entry.revision)))
    }

    /// Sends `message` to conversation `id` (created when it does not
    /// exist, entered at the agent type the message addresses): it starts
    /// the next turn, or waits behind the running one, as
    /// `message.overlap` says.
    ///
    /// # Errors
    ///
    /// [`ConversationErrorKind::Forbidden`] for another caller's
    /// conversation; [`ConversationErrorKind::Busy`] for `reject` while a
    /// turn runs; [`ConversationErrorKind::Store`] when JetStream fails.
    pub async fn send(&self, id: &str, message: &UserMessage) -> Result<Sent, ConversationError> {
        let read = self.get(id).await?;
        self.send_after(id, message, read).await
    }

    /// [`Conversations::send`], given what the caller just read of the
    /// conversation ([`Conversations::get`]): one read fewer.
    ///
    /// # Errors
    ///
    /// As for [`Conversations::send`].
    pub async fn send_after(
        &self,
        id: &str,
        message: &UserMessage,
        read: Option<(Conversation, u64)>,
    ) -> Result<Sent, ConversationError> {
        let key = Conversation::key_of(id);
        let mine = &message.turn;
        let mut read = Some(read);
        loop {
            let found = match read.take() {
                Some(read) => read,
                None => self.read(&key).await?,
            };
            let (mut record, revision) = match found {
                Some(found) => found,
                None => {
                    let entry = mine.to.clone();
                    (Conversation::new(id, message.caller.clone(), entry), 0)
                }
            };
            owned(id, &record, &message.caller)?;
            if let (Overlap::Interrupt, Some(running)) = (message.overlap, record.running.clone()) {
                if !running.interrupted {
                    // Noted before the cancel, so whoever settles the turn
                    // carries its message on to the next.
                    if let Some(running) = record.running.as_mut() {
                        running.interrupted = true;
                    }
                    self.swap(&key, &record, revision).await?;
                    continue;
                }
                self.interrupt(&mut record, &running).await?;
            }
            let mut started = self.settle(&mut record).await?;
            let sent = match (&record.running, message.overlap) {
                (None, _) => begin(&mut record, mine.clone(), &mut started),
                (Some(running), Overlap::Reject) => {
                    return Err(ConversationError::new(
                        ConversationErrorKind::Busy,
                        format!(
                            "conversation {id} is busy: turn {} runs as session {}; send again when it ends, or with overlap enqueue",
                            record.turns, running.session
                        ),
                    ));
                }
                // (An interrupt leaves no turn running.)
                (Some(_), Overlap::Enqueue | Overlap::Interrupt) => {
                    record.queue.push(mine.clone());
                    Sent::Queued {
                        session: mine.session,
                        ahead: record.queue.len() - 1,
                    }
                }
            };
            if self.swap(&key, &record, revision).await? {
                // Only the running turn is sent (a queued turn an
                // interrupt cancelled before it was sent is not).
                if started {
                    self.start(&record, record.turns).await?;
                    self.note_sent_later(key, record.turns);
                }
                return Ok(sent);
            }
        }
    }

    /// Notes in the background that running turn `turn` of the record at
    /// `key` was sent, once the turn had time to end (most turns then need
    /// no note, and the note's read and write stay off the turn's path). A
    /// note that is lost only lets the keeper send the same task again,
    /// under the same id.
    fn note_sent_later(&self, key: String, turn: u32) {
        let store = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(NOTED_AFTER).await;
            if let Err(err) = store.mark_sent(&key, turn).await {
                tracing::warn!(error = %err, "cannot note that a turn was sent");
            }
        });
    }

    /// Notes in the record that running turn `turn`'s task was published,
    /// so the keeper does not send it again; a record that moved on since
    /// is left as it is.
    pub(super) async fn mark_sent(&self, key: &str, turn: u32) -> Result<(), ConversationError> {
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
    async fn swap(
        &self,
        key: &str,
        record: &Conversation,
        revision: u64,
    ) -> Result<bool, ConversationError> {
        let mut record = record.clone();
        record.updated_at = baton_proto::now_ms();
        let bytes = rmp_serde::to_vec_named(&record)
            .map_err(|err| ConversationError::store(format!("cannot encode: {err}")))?;
        let lost = if revision == 0 {
            match self.store.create(key, bytes.into()).await {
                Ok(revision) => {
                    self.records.keep(key, record, revision);
                    return Ok(true);
                }
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => return Ok(false),
                Err(err) => err.to_string(),
            }
        } else {
            match self.store.update(key, bytes.into(), revision).await {
                Ok(revision) => {
                    self.records.keep(key, record, revision);
                    return Ok(true);
                }
                Err(err) if err.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                    return Ok(false);
                }
                Err(err) => err.to_string(),
            }
        };
        Err(ConversationError::store(format!(
            "cannot store {key}: {lost}"
        )))
    }
}

/// Refuses `caller` conversation `id` when `record` belongs to another
/// caller.
fn owned(
    id: &str,
    record: &Conversation,
    caller: &Option<String>,
) -> Result<(), ConversationError> {
    if record.owner.is_some() && record.owner != *caller {
        return Err(ConversationError::new(
            ConversationErrorKind::Forbidden,
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
        .with(crate::nats::ending::footprint(subjects))
        // A turn goes past the router, to the agent type that holds it,
        // after reading the router's defaults and whether it is served.
        .with(crate::nats::served::footprint(subjects))
        .publishes([format!("{}.agent.*", subjects.prefix())])
        .noting(
            "a conversation's turn goes straight to the agent type that holds it, which may be any",
        )
}

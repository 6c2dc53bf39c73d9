//! Conversations' transcripts: the log of entries a turn's context refers
//! to ([`baton_proto::transcript`]), kept in their own bucket
//! (`BATON_TRANSCRIPTS`, apart from the conversations' records, so workers
//! read transcripts and nothing else) under `<conversation>.<entry>`. It
//! has no age limit: a conversation's transcript goes when it is deleted
//! or idle for its time to live.
//!
//! Whoever closes a turn appends its entry ([`Transcripts::append`]); a
//! worker reads the entries a turn's context refers to before its agent
//! runs ([`Transcripts::prefix`]). Each process remembers the last
//! transcript it read or wrote of each recent conversation, so the next
//! turn of a conversation whose last turn ran here reads nothing, and
//! another reads only the entries added since.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, ErrorKind};
use async_nats::jetstream::{self, kv};
use baton_proto::footprint::{Footprint, api};
use baton_proto::transcript::{chain, empty_head};
use baton_proto::{Base, Conversation, Event, History, Message, Subjects, TranscriptEntry};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::OnceCell;

/// How many conversations a process remembers, and how many of their
/// messages in all; past either, it forgets them all.
const KEPT: usize = 256;
const KEPT_MESSAGES: usize = 50_000;

/// How many entries a reader asks for at once.
const READ_AHEAD: usize = 32;

/// The last transcript known of one conversation.
#[derive(Clone)]
struct Known {
    entries: u32,
    head: String,
    messages: Arc<[Message]>,
}

impl Known {
    /// An empty transcript.
    fn empty() -> Self {
        Self {
            entries: 0,
            head: empty_head(),
            messages: Arc::from(Vec::new()),
        }
    }

    /// Where a reader of `history` begins: before its base entry, or before
    /// entry 1.
    fn origin(history: &History) -> Self {
        let (entries, head) = history.base.as_ref().map_or_else(
            || (0, empty_head()),
            |base| (base.entry.saturating_sub(1), base.head.clone()),
        );
        Self {
            entries,
            head,
            ..Self::empty()
        }
    }
}

/// The transcripts of one deployment.
#[derive(Clone)]
pub struct Transcripts {
    jetstream: jetstream::Context,
    bucket: String,
    store: Arc<OnceCell<kv::Store>>,
    known: Arc<Mutex<HashMap<String, Known>>>,
}

impl std::fmt::Debug for Transcripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transcripts")
            .field("bucket", &self.bucket)
            .finish_non_exhaustive()
    }
}

impl Transcripts {
    /// The transcripts of `subjects`' deployment, their bucket opened on
    /// first use (a worker's: whoever closes turns creates it).
    #[must_use]
    pub fn new(jetstream: jetstream::Context, subjects: &Subjects) -> Self {
        Self {
            jetstream,
            bucket: subjects.transcripts_bucket(),
            store: Arc::default(),
            known: Arc::default(),
        }
    }

    /// Opens the transcripts of `subjects`' deployment, creating their
    /// bucket with `replicas` when it is missing.
    ///
    /// # Errors
    ///
    /// When JetStream refuses the bucket.
    pub async fn open(
        jetstream: jetstream::Context,
        subjects: &Subjects,
        replicas: usize,
    ) -> Result<Self, Error> {
        let store = crate::state::Bucket::Transcripts
            .open(&jetstream, subjects, replicas)
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot open the transcripts", err)
            })?;
        Ok(Self {
            jetstream,
            bucket: store.name.clone(),
            store: Arc::new(OnceCell::new_with(Some(store))),
            known: Arc::default(),
        })
    }

    /// Removes the transcript of the conversation whose record's key ends
    /// in `hex`: one purge of its entries' subjects, which leaves nothing
    /// behind.
    ///
    /// # Errors
    ///
    /// When the stream refuses the purge.
    pub async fn purge_hex(&self, hex: &str) -> Result<(), Error> {
        crate::nats::provision::purge_keys(&self.jetstream, &self.bucket, &format!("{hex}.>"))
            .await
            .map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot purge the transcript", err)
            })
    }

    async fn store(&self) -> Result<&kv::Store, Error> {
        self.store
            .get_or_try_init(|| async {
                self.jetstream
                    .get_key_value(&self.bucket)
                    .await
                    .map_err(|err| {
                        Error::new(
                            ErrorKind::JetStream,
                            format!("cannot open the transcripts bucket {}: {err}", self.bucket),
                        )
                    })
            })
            .await
    }

    /// The messages `history` refers to.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Broken`] when an entry is missing or the chain
    /// does not end at `history`'s head; [`ErrorKind::JetStream`] when
    /// the bucket cannot be read.
    pub async fn prefix(&self, history: &History) -> Result<Arc<[Message]>, Error> {
        let id = &history.conversation;
        let origin = Known::origin(history);
        // What is known helps when it lies between the reader's origin
        // and the history's end.
        let known = self
            .known(id)
            .filter(|known| known.entries <= history.entries && known.entries >= origin.entries);
        if let Some(known) = &known {
            if known.entries == history.entries && known.head == history.head {
                return Ok(known.messages.clone());
            }
        }
        // Read on from what is known when the chain goes through it; else
        // (a fork, or an older turn replayed) from the origin.
        let mut read = None;
        if let Some(known) = known {
            read = self.read_on(id, known, history).await?;
        }
        if read.is_none() {
            read = self.read_on(id, origin, history).await?;
        }
        let messages =
            read.ok_or_else(|| broken(id, "its entries do not chain to the head its turn names"))?;
        self.remember(id, history.entries, &history.head, messages.clone());
        Ok(messages)
    }

    /// The messages `history` refers to, read on from `known`; `None` when
    /// they do not chain to its head.
    async fn read_on(
        &self,
        id: &str,
        known: Known,
        history: &History,
    ) -> Result<Option<Arc<[Message]>>, Error> {
        let Known {
            entries,
            mut head,
            messages,
        } = known;
        let mut messages = messages.to_vec();
        for (bytes, entry) in self.read(id, entries + 1..=history.entries).await? {
            head = chain(&head, &bytes);
            entry.apply_to(&mut messages);
        }
        let whole = head == history.head && messages.len() == history.messages as usize;
        Ok(whole.then(|| messages.into()))
    }

    /// Entries `range` of conversation `id`, with their bytes as stored.
    async fn read(
        &self,
        id: &str,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<Vec<(bytes::Bytes, TranscriptEntry)>, Error> {
        let store = self.store().await?;
        futures::stream::iter(range)
            .map(|entry| async move {
                let key = Conversation::entry_key(id, entry);
                let bytes = store
                    .get(&key)
                    .await
                    .map_err(|err| {
                        Error::with_source(ErrorKind::JetStream, format!("cannot read {key}"), err)
                    })?
                    .ok_or_else(|| broken(id, &format!("entry {entry} ({key}) is gone")))?;
                let decoded = rmp_serde::from_slice(&bytes)
                    .map_err(|err| broken(id, &format!("entry {entry} is unreadable: {err}")))?;
                Ok((bytes, decoded))
            })
            .buffered(READ_AHEAD)
            .try_collect()
            .await
    }

    /// Message `message` (from 0) of entry `entry` of conversation `id`'s
    /// transcript; `None` when the entry holds fewer messages.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Broken`] when the entry is gone or unreadable;
    /// [`ErrorKind::JetStream`] when the bucket cannot be read.
    pub async fn message(
        &self,
        id: &str,
        entry: u32,
        message: u32,
    ) -> Result<Option<Message>, Error> {
        let read = self.read(id, entry..=entry).await?.pop();
        let messages = read.map(|(_, entry)| entry.messages).unwrap_or_default();
        Ok(usize::try_from(message)
            .ok()
            .and_then(|at| messages.into_iter().nth(at)))
    }

    /// Appends `entry` as entry `after.entries + 1` of conversation `id`
    /// (`after`: its transcript so far, `None` when empty): the transcript
    /// after it. Appending the same entry again changes nothing; an entry
    /// stored there already is the one that counts.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::JetStream`] when the bucket cannot be written.
    pub async fn append(
        &self,
        id: &str,
        after: Option<&History>,
        entry: &TranscriptEntry,
    ) -> Result<History, Error> {
        let number = after.map_or(0, |after| after.entries) + 1;
        let key = Conversation::entry_key(id, number);
        let bytes = entry.to_bytes().map_err(|err| {
            Error::with_source(ErrorKind::Encode, format!("cannot encode {key}"), err)
        })?;
        let store = self.store().await?;
        let (bytes, entry) = match store.create(&key, bytes.clone().into()).await {
            Ok(_) => (bytes::Bytes::from(bytes), entry.clone()),
            Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => {
                // Appended already (a closing repeated): that entry counts.
                self.read(id, number..=number)
                    .await?
                    .pop()
                    .ok_or_else(|| broken(id, &format!("entry {number} is gone")))?
            }
            Err(err) => {
                return Err(Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot store {key}"),
                    err,
                ));
            }
        };
        Ok(following(id, after, &entry, &bytes))
    }

    /// Copies the first `entries` entries of conversation `from`'s
    /// transcript to conversation `to`, byte for byte (so their chain, and
    /// what a turn after them reads, is the same): `to`'s transcript after
    /// them.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Broken`] when an entry is gone or one of `to`'s
    /// exists already; [`ErrorKind::JetStream`] when the bucket fails.
    pub async fn copy(&self, from: &str, to: &str, entries: u32) -> Result<History, Error> {
        let store = self.store().await?;
        let mut history: Option<History> = None;
        for (bytes, entry) in self.read(from, 1..=entries).await? {
            let next = following(to, history.as_ref(), &entry, &bytes);
            let key = Conversation::entry_key(to, next.entries);
            store.create(&key, bytes.clone()).await.map_err(|err| {
                Error::with_source(
                    ErrorKind::Broken,
                    format!("cannot copy the transcript to {key}"),
                    err,
                )
            })?;
            history = Some(next);
        }
        Ok(history.unwrap_or_else(|| History {
            conversation: to.to_owned(),
            entries: 0,
            messages: 0,
            head: empty_head(),
            base: None,
            extra: baton_proto::Map::new(),
        }))
    }

    /// Remembers the transcript a turn's `end` makes, when this process
    /// holds the messages before it: the next turn that runs here reads
    /// nothing. What whoever closes the turn will append is computed here the
    /// same way, so the heads agree.
    pub fn learn(&self, end: &Event) {
        let (Some(turn), Some(context)) = (&end.conversation, &end.context) else {
            return;
        };
        if !end.kind.is_terminal() {
            return;
        }
        let (before, base) = match &context.history {
            Some(history) => match self.known(&turn.id) {
                Some(known) if known.head == history.head => (known, false),
                _ => return,
            },
            // The turn rewrote the conversation (a compaction): its entry
            // holds it whole, and follows the last one known here, if any
            // (when another came between, the next read finds the chain
            // broken there and reads from the entry).
            None => (self.known(&turn.id).unwrap_or_else(Known::empty), true),
        };
        let entry = entry_of(turn.turn, base, context.messages.clone());
        let Ok(bytes) = entry.to_bytes() else {
            return;
        };
        let mut messages = before.messages.to_vec();
        entry.apply_to(&mut messages);
        let head = chain(&before.head, &bytes);
        self.remember(&turn.id, before.entries + 1, &head, messages.into());
    }

    fn known(&self, id: &str) -> Option<Known> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(id).cloned()
    }

    fn remember(&self, id: &str, entries: u32, head: &str, messages: Arc<[Message]>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let held: usize = known.values().map(|known| known.messages.len()).sum();
        if (known.len() >= KEPT && !known.contains_key(id)) || held + messages.len() > KEPT_MESSAGES
        {
            known.clear();
        }
        known.insert(
            id.to_owned(),
            Known {
                entries,
                head: head.to_owned(),
                messages,
            },
        );
    }
}

/// The entry a turn that ended with `messages` appends: what it added to
/// the transcript, or (`base`) the whole of it.
#[must_use]
pub fn entry_of(turn: u32, base: bool, messages: Vec<Message>) -> TranscriptEntry {
    TranscriptEntry {
        turn,
        base,
        messages,
        extra: baton_proto::Map::new(),
    }
}

/// Conversation `id`'s transcript after `entry`, whose bytes as stored are
/// `bytes`, follows `after` (`None`: an empty transcript).
fn following(id: &str, after: Option<&History>, entry: &TranscriptEntry, bytes: &[u8]) -> History {
    let before = after.map_or_else(empty_head, |after| after.head.clone());
    let number = after.map_or(0, |after| after.entries) + 1;
    // A base at entry 1 is where every reader begins anyway.
    let base = if entry.base && number > 1 {
        Some(Base {
            entry: number,
            head: before.clone(),
            extra: baton_proto::Map::new(),
        })
    } else if entry.base {
        None
    } else {
        after.and_then(|after| after.base.clone())
    };
    History {
        conversation: id.to_owned(),
        entries: number,
        messages: entry.count_after(after.map_or(0, |after| after.messages)),
        head: chain(&before, bytes),
        base,
        extra: baton_proto::Map::new(),
    }
}

fn broken(id: &str, why: &str) -> Error {
    Error::new(
        ErrorKind::Broken,
        format!("the transcript of conversation {id} is broken: {why}"),
    )
}

/// What removing transcripts uses (deleting a conversation): purging
/// their entries.
#[must_use]
pub fn purging_footprint(subjects: &Subjects) -> Footprint {
    let stream = format!("KV_{}", subjects.transcripts_bucket());
    Footprint::new().publishes([api(format_args!("STREAM.PURGE.{stream}"))])
}

/// What reading transcripts uses (a worker's part): entries of the
/// transcripts bucket.
#[must_use]
pub fn footprint(subjects: &Subjects) -> Footprint {
    let bucket = subjects.transcripts_bucket();
    let stream = format!("KV_{bucket}");
    Footprint::new().publishes([
        api(format_args!("STREAM.INFO.{stream}")),
        api(format_args!("DIRECT.GET.{stream}.>")),
    ])
}

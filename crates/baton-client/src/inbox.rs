//! The human inbox: tasks that wait for a person, in a durable key-value
//! bucket (`BATON_INBOX`), file-backed, so a waiting task survives restarts
//! of every process. A human agent's worker stores the envelope under its
//! id and acks it with a `waiting` event. A reply (`baton inbox reply`, the
//! console, A2A) adds the person's answer to the conversation, then
//! completes the session or hands it on, with ids derived from the
//! envelope's, and only then removes the entry.
//!
//! Entries are keyed by envelope id, and each is also named under its
//! session (`inbox/by_session`): an agent's question to the user
//! (`ask_user`) under `q.<session>`, any other entry under `w.<session>`,
//! so a conversation or a gateway finds what a session waits on with a
//! keyed read, not a listing.

mod answer;
mod by_session;
mod decided;
mod gates;
pub use decided::Decision;

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, kv};
use baton_proto::{AgentName, Envelope, Event, Reason, Subjects, Value, Wire, headers};

use baton_nats::nats::connection::Permissions;
use baton_nats::nats::publish::Publisher;
use baton_nats::state::rollouts::Rollouts;
use baton_nats::{ClaimCheck, ClaimSettings, Error, ErrorKind};

/// One task waiting for a person.
#[derive(Debug, Clone)]
pub struct InboxEntry {
    /// The envelope as the human agent received it.
    pub envelope: Envelope,
    /// When it arrived in the inbox, unix ms.
    pub since: u64,
    revision: u64,
}

impl InboxEntry {
    /// The human agent type it waits for.
    #[must_use]
    pub fn agent(&self) -> &str {
        self.envelope.to.as_deref().unwrap_or("human")
    }

    /// The agent type it waits at, as a name (`human` when it names none).
    #[must_use]
    pub fn agent_type(&self) -> AgentName {
        (self.envelope.to.clone()).unwrap_or_else(|| AgentName::from_static("human"))
    }
}

/// What a person does with a waiting task.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The answer ends the session.
    Complete,
    /// The answer ends the session with this output (e.g. an `a2a` entry,
    /// A2A's terms) instead of its text, which the conversation keeps.
    Output(Value),
    /// The answer goes on to this agent type.
    Handoff(AgentName),
}

/// The inbox of waiting tasks.
#[derive(Clone)]
pub struct Inbox {
    store: kv::Store,
    jetstream: jetstream::Context,
    subjects: Subjects,
    /// Large contexts are stored claim-checked, like messages.
    claims: std::sync::Arc<ClaimCheck>,
    /// Follows the agent types' rollouts, for the first answer that sends
    /// a session on: it goes straight to the version it is pinned to.
    publisher: Publisher,
    rollouts: std::sync::Arc<tokio::sync::OnceCell<Rollouts>>,
    replicas: usize,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("bucket", &self.subjects.inbox_bucket())
            .finish_non_exhaustive()
    }
}

impl Inbox {
    /// Opens the inbox bucket, creating it if it is missing.
    ///
    /// # Errors
    ///
    /// When JetStream cannot be reached or refuses to create the bucket.
    pub async fn open(
        client: async_nats::Client,
        subjects: Subjects,
        replicas: usize,
    ) -> Result<Self, Error> {
        let claims = ClaimCheck::open(&client, &subjects, ClaimSettings::default());
        let jetstream = jetstream::new(client);
        let publisher = Publisher::new(jetstream.clone(), Permissions::default());
        let bucket = subjects.inbox_bucket();
        let opened = baton_nats::state::Bucket::Inbox.open(&jetstream, &subjects, replicas);
        let store = opened.await.map_err(|err| {
            Error::with_source(
                ErrorKind::JetStream,
                format!("cannot open the inbox bucket {bucket}"),
                err,
            )
        })?;
        Ok(Self {
            store,
            jetstream,
            subjects,
            claims: std::sync::Arc::new(claims),
            publisher,
            rollouts: std::sync::Arc::default(),
            replicas,
        })
    }

    /// The agent types' rollouts, followed from the first answer.
    async fn rollouts(&self) -> &Rollouts {
        self.rollouts
            .get_or_init(|| Rollouts::follow(&self.publisher, &self.subjects, self.replicas))
            .await
    }

    /// Puts `envelope` in the inbox (again, harmlessly, on a redelivery).
    ///
    /// # Errors
    ///
    /// When the bucket does not acknowledge the write.
    pub async fn put(&self, envelope: &Envelope) -> Result<(), Error> {
        let bytes = envelope
            .to_msgpack()
            .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode the task", err))?;
        let bytes = self.claims.pack(bytes.into()).await.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot store the task's context", err)
        })?;
        self.store
            .put(envelope.id.to_string(), bytes)
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    "cannot store the task in the inbox",
                    err,
                )
            })?;
        // Found by its session, after the entry, so the key never names an
        // entry not yet stored.
        self.note_session(envelope).await
    }

    /// Every waiting task, oldest first.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read.
    pub async fn list(&self) -> Result<Vec<InboxEntry>, Error> {
        use futures::StreamExt;
        let mut keys = self.store.keys().await.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot list the inbox", err)
        })?;
        let mut entries = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot list the inbox", err)
            })?;
            if by_session::is_session_key(&key) {
                continue;
            }
            if let Some(entry) = self.entry(&key).await? {
                if self.cancelled(entry.envelope.session).await {
                    self.forget(&entry).await;
                } else {
                    entries.push(entry);
                }
            }
        }
        entries.sort_by_key(|entry| entry.since);
        Ok(entries)
    }

    /// The waiting task with envelope id `id`, if it is still waiting.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be read or the entry is not an envelope.
    pub async fn entry(&self, id: &str) -> Result<Option<InboxEntry>, Error> {
        let Some(entry) = self.store.entry(id).await.map_err(|err| {
            Error::with_source(ErrorKind::JetStream, "cannot read the inbox", err)
        })?
        else {
            return Ok(None);
        };
        if entry.operation != kv::Operation::Put {
            return Ok(None);
        }
        let not_envelope = |err: String| {
            Error::with_source(
                ErrorKind::Decode,
                format!("inbox entry {id} is not an envelope"),
                err,
            )
        };
        let mut envelope =
            Envelope::from_msgpack(&entry.value).map_err(|err| not_envelope(err.to_string()))?;
        if !envelope.claims.is_empty() {
            let whole = self
                .claims
                .unpack(&entry.value)
                .await
                .map_err(|err| not_envelope(err.to_string()))?;
            envelope = Envelope::from_msgpack_limited(&whole, self.claims.restored_limit())
                .map_err(|err| not_envelope(err.to_string()))?;
        }
        let since = u64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
        Ok(Some(InboxEntry {
            envelope,
            since,
            revision: entry.revision,
        }))
    }

    /// Answers waiting task `id` with `text` from `person`, then completes the
    /// session or hands it on. Returns the event that says what happened.
    ///
    /// # Errors
    ///
    /// When the task is not (or no longer) waiting, or the outputs are not
    /// acknowledged; in the latter case the task stays in the inbox.
    pub async fn reply(
        &self,
        id: &str,
        text: &str,
        reply: Reply,
        person: &str,
    ) -> Result<Event, Error> {
        let entry = self.entry(id).await?.ok_or_else(|| {
            Error::new(
                ErrorKind::NotWaiting,
                format!(
                    "no task {id} is waiting in the inbox (already answered? see `baton inbox ls`)"
                ),
            )
        })?;
        if let Some(gate) = entry.gate() {
            return Err(Error::new(
                ErrorKind::WrongAnswer,
                format!(
                    "{id} is a tool call of {} waiting for {}, not a question: settle it with {}",
                    entry.agent(),
                    gate.reason,
                    gates::commands_for(&gate.reason, id)
                ),
            ));
        }
        if self.cancelled(entry.envelope.session).await {
            self.forget(&entry).await;
            return Err(Error::new(
                ErrorKind::Ended,
                format!(
                    "task {id}'s session {} was cancelled; the task is removed from the inbox",
                    entry.envelope.session
                ),
            ));
        }
        if entry
            .envelope
            .deadline
            .is_some_and(|deadline| baton_proto::now_ms() > deadline)
        {
            return Err(Error::new(
                ErrorKind::Ended,
                format!(
                    "task {id}'s session passed its deadline and has ended; the answer would come too late"
                ),
            ));
        }
        if let Reply::Handoff(to) = &reply {
            let served = baton_nats::is_served(&self.jetstream, &self.subjects, to)
                .await
                .map_err(|err| Error::new(ErrorKind::JetStream, baton_nats::error_chain(&err)))?;
            if !served {
                return Err(Error::new(
                    ErrorKind::NoRoute,
                    format!(
                        "no worker serves agent type \"{to}\": check the name, or start `baton worker {to}`; the task stays in the inbox"
                    ),
                ));
            }
        }
        let rollouts = self.rollouts().await;
        let (event, outgoing) = self.answer(&entry, (text, reply, person), rollouts)?;
        for (subject, id, payload) in outgoing {
            let payload = self.claims.pack(payload.into()).await.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "cannot send the answer", err)
            })?;
            self.publish(subject, id, payload).await?;
        }
        // The outputs are durable; a second reply racing this one publishes
        // the same ids (dropped as duplicates) and finds the entry gone.
        self.forget(&entry).await;
        Ok(event)
    }

    /// Whether `session` was cancelled (`baton cancel`, A2A `CancelTask`).
    /// A bucket that cannot be read counts as no cancel.
    pub async fn cancelled(&self, session: uuid::Uuid) -> bool {
        let Ok(store) = self
            .jetstream
            .get_key_value(self.subjects.cancelled_bucket())
            .await
        else {
            return false;
        };
        matches!(store.get(session.to_string()).await, Ok(Some(_)))
    }

    /// Removes `entry` (answered, or a task of a cancelled session) from
    /// the inbox, and the key that found it by its session.
    async fn forget(&self, entry: &InboxEntry) {
        let id = entry.envelope.id.to_string();
        if let Err(err) = self
            .store
            .delete_expect_revision(&id, Some(entry.revision))
            .await
        {
            tracing::debug!(error = %err, "inbox entry already removed");
        }
        self.forget_session(entry).await;
    }

    /// Publishes one message with its id for deduplication and waits for
    /// the stream's acknowledgement.
    async fn publish(
        &self,
        subject: String,
        id: uuid::Uuid,
        payload: bytes::Bytes,
    ) -> Result<(), Error> {
        let mut header = HeaderMap::new();
        header.insert(headers::MSG_ID, id.to_string().as_str());
        let ack = self
            .jetstream
            .publish_with_headers(subject.clone(), header, payload)
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    format!("cannot publish to {subject}"),
                    err,
                )
            })?;
        tokio::time::timeout(Duration::from_secs(10), ack)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorKind::JetStream,
                    format!("no acknowledgement for {subject}"),
                )
            })?
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    format!("publish to {subject} failed"),
                    err,
                )
            })?;
        Ok(())
    }
}

/// One message to publish: subject, id (for deduplication) and bytes.
type Publication = (String, uuid::Uuid, Vec<u8>);

/// Whether `envelope` is an agent's question to the user (`ask_user`).
fn asks(envelope: &Envelope) -> bool {
    (envelope.gate.as_ref()).is_some_and(|gate| gate.reason == Reason::InputRequired)
}

fn encode<T: Wire>(value: &T) -> Result<Vec<u8>, Error> {
    value
        .to_msgpack()
        .map_err(|err| Error::with_source(ErrorKind::Encode, "cannot encode", err))
}

/// What the inbox uses: its bucket, read and written by a human agent's
/// worker; with `listing`, its keys listed too (`baton inbox ls`, the
/// console).
#[must_use]
pub fn footprint(subjects: &Subjects, listing: bool) -> baton_proto::footprint::Footprint {
    let bucket = subjects.inbox_bucket();
    let inbox = baton_proto::footprint::Footprint::kv(&bucket);
    if listing {
        inbox.with(baton_proto::footprint::Footprint::kv_watcher(&bucket))
    } else {
        inbox
    }
}

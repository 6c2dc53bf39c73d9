//! Reading and replaying the dead-letter stream.

use async_nats::HeaderMap;
use async_nats::jetstream;
use baton_proto::footprint::{Footprint, api};
use baton_proto::{
    DeadLetterReason, Envelope, Event, EventType, Wire, derive_id_labelled, headers, now_ms,
};
use bytes::Bytes;
use futures::StreamExt;
use uuid::Uuid;

use crate::client::Client;
use baton_nats::nats::publish::{Class, Outgoing};
use baton_nats::pipeline::address::replayed;
use baton_nats::{Error, ErrorKind};

/// One dead letter: the original bytes and why they ended here.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeadLetterEntry {
    /// Sequence in the dead-letter stream; the handle for replay.
    pub seq: u64,
    /// Dead-letter subject (`baton.dlq.<agent>`).
    pub subject: String,
    /// Reason code (`Baton-Error`).
    pub reason: DeadLetterReason,
    /// Human-readable detail (`Baton-Error-Detail`).
    pub detail: String,
    /// Agent type whose worker gave up (`Baton-Agent`).
    pub agent: String,
    /// Subject to replay to (`Baton-Original-Subject`).
    pub original_subject: String,
    /// Delivery count when it gave up (`Baton-Deliveries`).
    pub deliveries: u64,
    /// The message id of the dead letter (`Nats-Msg-Id`).
    pub id: Option<String>,
    /// The envelope's session, when the bytes are a readable envelope.
    pub session: Option<Uuid>,
    /// The envelope's id, when the bytes are a readable envelope.
    pub envelope: Option<Uuid>,
    /// The original size, when the letter's payload was cut to fit the
    /// server's `max_payload` (`Baton-Truncated`).
    pub truncated: Option<u64>,
    /// The original bytes (their first part, when `truncated`).
    pub payload: Bytes,
}

fn header(headers: Option<&HeaderMap>, name: &str) -> String {
    headers
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_owned())
        .unwrap_or_default()
}

impl DeadLetterEntry {
    fn new(seq: u64, subject: String, headers: Option<&HeaderMap>, payload: Bytes) -> Self {
        let envelope = Envelope::from_msgpack_limited(&payload, usize::MAX).ok();
        Self {
            seq,
            subject,
            reason: DeadLetterReason::parse(&header(headers, headers::ERROR)),
            detail: header(headers, headers::ERROR_DETAIL),
            agent: header(headers, headers::AGENT),
            original_subject: header(headers, headers::ORIGINAL_SUBJECT),
            deliveries: header(headers, headers::DELIVERIES).parse().unwrap_or(0),
            id: headers
                .and_then(|h| h.get(headers::MSG_ID))
                .map(|v| v.as_str().to_owned()),
            session: envelope.as_ref().map(|e| e.session),
            envelope: envelope.as_ref().map(|e| e.id),
            truncated: header(headers, headers::TRUNCATED).parse().ok(),
            payload,
        }
    }
}

impl Client {
    /// The dead-letter stream; `None` when it does not exist yet (nothing
    /// was ever dead-lettered on this server).
    async fn dlq_stream(&self) -> Result<Option<jetstream::stream::Stream>, Error> {
        let name = self.subjects().dlq_stream();
        match self.jetstream().get_stream(&name).await {
            Ok(stream) => Ok(Some(stream)),
            Err(err)
                if matches!(
                    err.kind(),
                    jetstream::context::GetStreamErrorKind::JetStream(inner)
                        if inner.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
                ) =>
            {
                Ok(None)
            }
            Err(err) => Err(Error::with_source(
                ErrorKind::JetStream,
                format!("cannot open stream {name}"),
                err,
            )),
        }
    }

    /// Every dead letter currently stored, oldest first.
    ///
    /// # Errors
    ///
    /// When the dead-letter stream cannot be read.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetterEntry>, Error> {
        let Some(mut stream) = self.dlq_stream().await? else {
            return Ok(Vec::new());
        };
        let last = stream
            .info()
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    "cannot read the dead-letter stream",
                    err,
                )
            })?
            .state
            .last_sequence;
        let mut entries = Vec::new();
        if stream.cached_info().state.messages == 0 {
            return Ok(entries);
        }
        let (mut messages, _reading) = baton_nats::nats::ordered::read_from_start(
            &stream,
            None,
            "read the dead-letter stream",
        )
        .await?;
        while let Some(message) = messages.next().await {
            let message = message.map_err(|err| {
                Error::with_source(ErrorKind::JetStream, "dead-letter stream failed", err)
            })?;
            let seq = message.info().map(|info| info.stream_sequence).unwrap_or(0);
            entries.push(DeadLetterEntry::new(
                seq,
                message.subject.to_string(),
                message.headers.as_ref(),
                message.payload.clone(),
            ));
            if seq >= last {
                break;
            }
        }
        Ok(entries)
    }

    /// Dead letter `seq`, if it is (still) stored.
    ///
    /// # Errors
    ///
    /// When the dead-letter stream cannot be read.
    pub async fn dead_letter(&self, seq: u64) -> Result<Option<DeadLetterEntry>, Error> {
        match self.dlq_stream().await? {
            Some(stream) => entry_at(&stream, seq).await,
            None => Ok(None),
        }
    }

    /// Publishes dead letter `seq` again to its original subject, as a new
    /// message (a readable envelope gets a new id derived from the old one and
    /// `seq`), then removes it from the dead-letter stream unless `keep`.
    ///
    /// Returns the id the replayed message was published with.
    ///
    /// # Errors
    ///
    /// When `seq` is not in the stream, has no original subject, or the publish fails.
    pub async fn replay(&self, seq: u64, options: ReplayOptions) -> Result<Uuid, Error> {
        let ReplayOptions {
            keep,
            extend_deadline,
        } = options;
        let missing = || {
            Error::new(
                ErrorKind::Config,
                format!("no dead letter with sequence {seq}: see `baton dlq ls`"),
            )
        };
        let stream = self.dlq_stream().await?.ok_or_else(missing)?;
        let entry = entry_at(&stream, seq).await?.ok_or_else(missing)?;
        if entry.original_subject.is_empty() {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "dead letter {seq} has no {} header",
                    headers::ORIGINAL_SUBJECT
                ),
            ));
        }
        if let Some(size) = entry.truncated {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "dead letter {seq} holds only the first {} of its {size} bytes (they were over the \
                     server's max_payload), so it cannot be replayed; `baton dlq ls` shows its reason",
                    entry.payload.len()
                ),
            ));
        }
        let (id, payload, subject) =
            match Envelope::from_msgpack_limited(&entry.payload, usize::MAX) {
                Ok(envelope) => self.reopen(&entry, envelope, extend_deadline).await?,
                // Unreadable bytes go back as they are (they will be
                // dead-lettered again unless the reader changed).
                Err(_) => (
                    Uuid::new_v4(),
                    entry.payload.clone(),
                    entry.original_subject.clone(),
                ),
            };
        let outgoing = Outgoing {
            class: Class::Plain,
            subject,
            id,
            payload,
            headers: Default::default(),
        };
        self.publisher().publish_one(&outgoing).await?;
        if !keep {
            stream.delete_message(seq).await.map_err(|err| {
                Error::with_source(
                    ErrorKind::JetStream,
                    format!("replayed, but could not remove dead letter {seq}"),
                    err,
                )
            })?;
        }
        Ok(id)
    }

    /// Re-opens the session of a readable dead letter: the deadline
    /// checked (or extended), addressed through the seam (a new id, the
    /// subject, a new deadline timer), and a `reopened` event. Returns the
    /// id, the bytes and the subject to publish.
    async fn reopen(
        &self,
        entry: &DeadLetterEntry,
        mut envelope: Envelope,
        extend_deadline: Option<std::time::Duration>,
    ) -> Result<(Uuid, Bytes, String), Error> {
        let seq = entry.seq;

        let now = now_ms();
        match (extend_deadline, envelope.deadline) {
            (Some(extra), _) => {
                let extra = u64::try_from(extra.as_millis()).unwrap_or(u64::MAX);
                envelope.deadline = Some(now.saturating_add(extra));
            }
            (None, Some(deadline)) if deadline <= now => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!(
                        "dead letter {seq}'s deadline has passed, so it would only be dead-lettered again: give it more time with --extend-deadline MS"
                    ),
                ));
            }
            (None, _) => {}
        }
        let rollouts = self.rollouts().await;
        let stored_from = entry.original_subject.as_str();
        let sent = replayed((rollouts, self.subjects()), seq, stored_from, &mut envelope);
        envelope.id = sent.id;
        // The session is open again: watchers and `wait` follow it to
        // its new end.
        let mut reopened = Event::new(
            derive_id_labelled(envelope.id, "reopened", 0),
            envelope.session,
            EventType::Reopened,
        );
        reopened.envelope = Some(envelope.id);
        reopened.reason = Some(baton_proto::Reason::from(&entry.reason));
        reopened.detail = Some(format!(
            "dead letter {seq} ({}) replayed to {}",
            entry.reason, sent.subject
        ));
        self.publisher()
            .publish_one(&Outgoing {
                class: Class::Plain,
                subject: self.subjects().events(envelope.session),
                id: reopened.id,
                payload: Bytes::from(reopened.to_msgpack().map_err(|err| {
                    Error::with_source(ErrorKind::Encode, "cannot encode an event", err)
                })?),
                headers: Default::default(),
            })
            .await?;
        // The session's deadline is watched again (a new one, when extended).
        if let Some(timer) = &sent.timer {
            self.publisher().publish_one(timer).await?;
        }
        let bytes = envelope.to_msgpack().map_err(|err| {
            Error::with_source(ErrorKind::Encode, "cannot re-encode the envelope", err)
        })?;
        Ok((envelope.id, Bytes::from(bytes), sent.subject))
    }
}

/// How to replay a dead letter.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ReplayOptions {
    /// Keep the dead letter in the stream after replaying it.
    pub keep: bool,
    /// Give the session this much more time from now (needed to replay a
    /// `deadline_exceeded` letter).
    pub extend_deadline: Option<std::time::Duration>,
}

impl ReplayOptions {
    /// Keeps the dead letter after the replay.
    #[must_use]
    pub fn keep(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }

    /// Extends the session's deadline to `extra` from now.
    #[must_use]
    pub fn extend_deadline(mut self, extra: Option<std::time::Duration>) -> Self {
        self.extend_deadline = extra;
        self
    }
}

/// The dead letter at `seq` of `stream`; `None` when the server has none there.
async fn entry_at(
    stream: &jetstream::stream::Stream,
    seq: u64,
) -> Result<Option<DeadLetterEntry>, Error> {
    use jetstream::stream::LastRawMessageErrorKind as Kind;
    match stream.get_raw_message(seq).await {
        Ok(message) => Ok(Some(DeadLetterEntry::new(
            seq,
            message.subject.to_string(),
            Some(&message.headers),
            message.payload,
        ))),
        // The server answered: nothing (any more) at that sequence.
        Err(err) if matches!(err.kind(), Kind::NoMessageFound | Kind::JetStream(_)) => Ok(None),
        Err(err) => Err(Error::with_source(
            ErrorKind::JetStream,
            format!("cannot read dead letter {seq}"),
            err,
        )),
    }
}

/// What listing, removing and replaying dead letters uses: reading the
/// dead-letter stream, deleting from it, and publishing a replay to any
/// agent type or the ingress, with its event.
#[must_use]
pub fn footprint(subjects: &baton_proto::Subjects) -> Footprint {
    let dlq = subjects.dlq_stream();
    Footprint::stream_reader(&dlq)
        .publishes([
            api(format_args!("STREAM.MSG.DELETE.{dlq}")),
            // Replays go back to any agent type or version of one (pinned
            // through the rollouts), or the ingress.
            format!("{}.agent.*", subjects.prefix()),
            format!("{}.agent.*.*", subjects.prefix()),
            subjects.ingress(),
            format!("{}.events.*", subjects.prefix()),
        ])
        .with(baton_nats::footprints::rollouts(subjects))
}

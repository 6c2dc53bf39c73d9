//! Durable, idempotent publishing: every message carries its id as
//! `Nats-Msg-Id`, and a publish counts only once its PubAck arrives.

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::jetstream::{self, message::PublishMessage};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use uuid::Uuid;

use crate::error::{Error, ErrorKind, error_chain};
use crate::nats::connection::Permissions;

mod guard;

/// One message to make durable.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// How the publisher treats it.
    pub class: Class,
    pub subject: String,
    pub id: Uuid,
    pub payload: Bytes,
    /// Shared by the messages of one delivery: built once, copied only
    /// into the publish itself.
    pub headers: std::sync::Arc<HeaderMap>,
}

impl Outgoing {
    /// The size the server counts against `max_payload`: payload and headers.
    pub fn size(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(name, values)| {
                values
                    .iter()
                    .map(|value| AsRef::<str>::as_ref(name).len() + value.as_str().len() + 4)
                    .sum::<usize>()
            })
            .sum();
        // `NATS/1.0\r\n`, the message id header and the closing blank line.
        self.payload.len() + headers + 12 + 16 + 36 + 2
    }

    fn publish(&self) -> PublishMessage {
        PublishMessage::build()
            .payload(self.payload.clone())
            .headers(HeaderMap::clone(&self.headers))
            .message_id(self.id.to_string())
    }
}

/// How the publisher treats an [`Outgoing`] message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    /// Published as it is.
    Plain,
    /// A dead letter: the original bytes of a message, which must land even
    /// when they and the reason headers are over `max_payload`. Then the
    /// payload is cut to fit and `Baton-Truncated` gives the original size.
    DeadLetter,
    /// An event that ends, or says why it ends, a session whose end is
    /// decided off its hop's own path (a dead letter's, the deadline
    /// watch's, a cancel's, a max-deliveries net's). It is written only
    /// while the session has not ended, and nothing is written between
    /// that check and the write (`Nats-Expected-Last-Subject-Sequence`).
    /// Names the events stream.
    Ending(String),
}

/// Whether guarded [`Class::Ending`] events were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Written: the session had not ended.
    Now,
    /// Not written: the session had ended already.
    Before,
}

/// How often a guarded write re-reads the session after another event
/// slipped in between its check and its write.
const GUARD_TRIES: usize = 10;

/// Publishes to JetStream and awaits PubAcks, retrying with backoff.
#[derive(Debug, Clone)]
pub struct Publisher {
    jetstream: jetstream::Context,
    /// The same context, its publishes and PubAcks bounded by
    /// [`ACK_PATIENCE`]: the client's own timer is the only one a publish
    /// has.
    publishing: jetstream::Context,
    client: async_nats::Client,
    permissions: Permissions,
    backoff: ExponentialBuilder,
}

/// Why one publish did not count.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server refused the subject: this user may not publish there.
    Refused,
    /// No stream takes the subject.
    NoStream,
    /// The message is over the server's `max_payload`.
    TooLarge,
    /// A guarded write found another event after the one it checked.
    Raced,
    /// Anything else: a timeout, a lost connection, a stream error.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => f.write_str("permissions violation"),
            Self::NoStream => f.write_str("no stream takes this subject"),
            Self::TooLarge => f.write_str("over the server's max_payload"),
            Self::Raced => f.write_str("another event was written first"),
            Self::Other(err) => f.write_str(err),
        }
    }
}

impl std::error::Error for Failure {}

/// How long one publish attempt waits for the stream's acknowledgement (the
/// publishing context's timeout). A stream whose leader died answers nothing
/// until it has a new one: ask again soon rather than wait out the client's
/// default 5 s. A copy that was stored after all has the same id and is
/// dropped.
const ACK_PATIENCE: Duration = Duration::from_secs(2);

impl Publisher {
    pub fn new(jetstream: jetstream::Context, permissions: Permissions) -> Self {
        // With ACK_PATIENCE per attempt, about 45 s in all: a stream
        // electing a new leader (a few seconds) is ridden out, and the first
        // attempt after the election is at most about 3 s late.
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(1))
            .with_max_times(16)
            .with_jitter();
        let mut publishing = jetstream.clone();
        publishing.set_timeout(ACK_PATIENCE);
        Self {
            client: jetstream.client(),
            publishing,
            jetstream,
            permissions,
            backoff,
        }
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The first subject of `messages` this user may not publish to, as the
    /// server reports the user's permissions.
    pub async fn forbidden<'m>(&self, messages: &'m [Outgoing]) -> Option<&'m str> {
        for message in messages {
            if !self
                .permissions
                .allows(&self.client, &message.subject)
                .await
            {
                return Some(&message.subject);
            }
        }
        None
    }

    /// Resolves once the server refuses a publish to `subject` sent at or
    /// after `since`; never, if it does not.
    pub(crate) async fn refused(&self, subject: &str, since: Instant) {
        self.permissions.refused(subject, since).await;
    }

    /// Whether this user may publish to `subject`, as far as the server says.
    pub(crate) async fn may_publish(&self, subject: &str) -> bool {
        self.permissions.allows(&self.client, subject).await
    }

    /// Checks, at start-up, that this user may publish to each of
    /// `subjects` (`what` names its use), as far as the server reports the
    /// user's permissions; `role` is how `baton permissions` names the role.
    pub async fn check_rights(&self, subjects: &[(&str, String)], role: &str) -> Result<(), Error> {
        for (what, subject) in subjects {
            if !self.permissions.allows(&self.client, subject).await {
                return Err(Error::new(
                    ErrorKind::Forbidden,
                    format!(
                        "this NATS user may not {what} (publish to {subject}): `baton permissions {role}` \
                         prints the permissions block this process needs"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Makes every message durable, in order.
    ///
    /// All are sent before any PubAck is awaited, so a batch costs one round
    /// trip. A message whose publish or PubAck fails is published again with
    /// the same id; JetStream drops a copy that had in fact been stored.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Forbidden`] or [`ErrorKind::NoStream`] when the server
    /// will never take a message (retrying cannot help), and
    /// [`ErrorKind::Publish`] when retries ran out.
    ///
    /// [`Class::Ending`] events are written after the others, and only while
    /// their session has not ended; see [`Publisher::publish_ending`].
    pub async fn publish_all(&self, messages: &[Outgoing]) -> Result<(), Error> {
        let ending = |message: &&Outgoing| matches!(message.class, Class::Ending(_));
        let since = Instant::now();
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages.iter().filter(|m| !ending(m)) {
            pending.push(self.send(message).await);
        }
        for (message, sent) in messages.iter().filter(|m| !ending(m)).zip(pending) {
            match self.acked(message, sent, since).await {
                Ok(_) => {}
                Err(err @ (Failure::Refused | Failure::TooLarge)) => {
                    return Err(failed(message, err));
                }
                Err(err) => {
                    tracing::debug!(subject = %message.subject, id = %message.id, error = %err, "publish not acknowledged; retrying");
                    Box::pin(self.publish_one(message)).await?;
                }
            }
        }
        // Collected only when there are any: a hop's own outputs allocate nothing here.
        let endings: Vec<&Outgoing> = messages.iter().filter(ending).collect();
        if !endings.is_empty() {
            Box::pin(self.publish_ending(&endings)).await?;
        }
        Ok(())
    }

    /// Writes the events of one session's end, in order, unless the
    /// session has ended already. The check and the writes are one step:
    /// the first write expects the last event the check read to be the
    /// session's last (`Nats-Expected-Last-Subject-Sequence`), each further
    /// write the one before it. When another event slipped in between, the
    /// session is read again. A repeated write of the same ids is dropped as
    /// a duplicate, as everywhere.
    ///
    /// # Errors
    ///
    /// As [`Publisher::publish_one`], and [`ErrorKind::Publish`] when other
    /// events keep slipping in.
    pub async fn publish_ending(&self, events: &[&Outgoing]) -> Result<Ended, Error> {
        let Some(first) = events.first() else {
            return Ok(Ended::Now);
        };
        let Class::Ending(stream) = &first.class else {
            return Err(Error::new(ErrorKind::Publish, "not an ending event"));
        };
        'check: for _ in 0..GUARD_TRIES {
            let end = guard::read(&self.jetstream, stream, &first.subject).await?;
            if end.ended {
                tracing::info!(subject = %first.subject, "the session has ended already; its end is not written again");
                return Ok(Ended::Before);
            }
            let mut expected = end.last_seq;
            for event in events {
                match self.publish_retrying(event, Some(expected)).await {
                    Ok(seq) => expected = seq,
                    Err(Failure::Raced) => continue 'check,
                    Err(err) => return Err(failed(event, err)),
                }
            }
            return Ok(Ended::Now);
        }
        Err(Error::new(
            ErrorKind::Publish,
            format!(
                "the end of the session on {} was not written: other events kept arriving",
                first.subject
            ),
        ))
    }

    /// Publishes `messages` on core NATS, unstored: live progress that
    /// watchers may see and nothing depends on, so a failure is only logged.
    pub async fn publish_live(&self, messages: &[Outgoing]) {
        for message in messages {
            let sent = self
                .client
                .publish_with_headers(
                    message.subject.clone(),
                    HeaderMap::clone(&message.headers),
                    message.payload.clone(),
                )
                .await;
            if let Err(err) = sent {
                tracing::debug!(subject = %message.subject, error = %err, "live progress event not sent");
            }
        }
    }

    /// Sends one message without waiting for its PubAck. A dead letter over
    /// the server's `max_payload` is cut to fit first.
    pub async fn send(&self, message: &Outgoing) -> Pending {
        self.send_expecting(message, None).await
    }

    /// As [`Publisher::send`]; with `expected`, the server stores the
    /// message only if the last one on its subject has that sequence (0:
    /// none).
    async fn send_expecting(&self, message: &Outgoing, expected: Option<u64>) -> Pending {
        let mut publish = match self.fitted(message) {
            Some(fitted) => fitted.publish(),
            None => message.publish(),
        };
        if let Some(expected) = expected {
            publish = publish.expected_last_subject_sequence(expected);
        }
        Pending(
            self.publishing
                .send_publish(message.subject.clone(), publish)
                .await
                .map_err(|err| Failure::from_publish(err.kind(), err.to_string())),
        )
    }

    /// A dead letter cut to the server's `max_payload`, when it is over it.
    fn fitted(&self, message: &Outgoing) -> Option<Outgoing> {
        if message.class != Class::DeadLetter {
            return None;
        }
        truncated(message, self.client.max_payload())
    }

    /// Waits for the PubAck of `sent`, or for the server to refuse its
    /// subject; the message's stream sequence.
    async fn acked(
        &self,
        message: &Outgoing,
        sent: Pending,
        since: Instant,
    ) -> Result<u64, Failure> {
        let ack = sent.0?;
        tokio::select! {
            acked = ack => acked
                .map(|ack| ack.sequence)
                .map_err(|err| Failure::from_publish(err.kind(), err.to_string())),
            () = self.permissions.refused(&message.subject, since) => Err(Failure::Refused),
        }
    }

    /// Why a publish found no responder: [`Failure::NoStream`] when the
    /// server says no stream takes `subject`; otherwise the stream exists
    /// but has no leader for now (a cluster electing one), which is retried.
    async fn confirm_no_stream(&self, subject: &str) -> Failure {
        match self.jetstream.stream_by_subject(subject).await {
            Err(err) if err.kind() == GetStreamByNameErrorKind::NotFound => Failure::NoStream,
            Ok(stream) => Failure::Other(format!("stream {stream} has no leader right now")),
            Err(err) => Failure::Other(format!(
                "no stream answered, and the stream list is unavailable: {err}"
            )),
        }
    }

    /// Publishes one message, retrying with backoff until it is
    /// acknowledged; see [`Publisher::publish_all`] for the errors.
    pub async fn publish_one(&self, message: &Outgoing) -> Result<(), Error> {
        self.publish_retrying(message, None)
            .await
            .map(drop)
            .map_err(|err| failed(message, err))
    }

    /// Publishes one message (with `expected`, as [`Publisher::send_expecting`]),
    /// retrying transient failures with backoff; its stream sequence.
    pub(crate) async fn publish_retrying(
        &self,
        message: &Outgoing,
        expected: Option<u64>,
    ) -> Result<u64, Failure> {
        let attempt = || async {
            let since = Instant::now();
            let sent = self.send_expecting(message, expected).await;
            match self.acked(message, sent, since).await {
                Err(Failure::NoStream) => Err(self.confirm_no_stream(&message.subject).await),
                other => other,
            }
        };
        attempt
            .retry(self.backoff)
            .when(Failure::is_transient)
            .notify(|err, delay| {
                tracing::warn!(subject = %message.subject, id = %message.id, error = %err, ?delay, "publish failed; retrying");
            })
            .await
    }
}

impl Failure {
    fn from_publish(kind: PublishErrorKind, detail: String) -> Self {
        match kind {
            PublishErrorKind::StreamNotFound => Self::NoStream,
            PublishErrorKind::MaxPayloadExceeded => Self::TooLarge,
            PublishErrorKind::WrongLastSequence => Self::Raced,
            _ => Self::Other(detail),
        }
    }

    /// Whether publishing again may succeed (a missing stream is confirmed
    /// as missing first: see [`Publisher::confirm_no_stream`]).
    fn is_transient(&self) -> bool {
        matches!(self, Self::Other(_))
    }
}

/// `message` with its payload cut so that payload and headers fit `limit`,
/// and `Baton-Truncated` giving the original size; `None` when it fits.
fn truncated(message: &Outgoing, limit: usize) -> Option<Outgoing> {
    let size = message.size();
    if size <= limit {
        return None;
    }
    let original = message.payload.len().to_string();
    // The new header, and a margin for how the client frames headers.
    let added = baton_proto::headers::TRUNCATED.len() + original.len() + 4 + 64;
    let keep = message.payload.len().saturating_sub(size - limit + added);
    let mut fitted = message.clone();
    fitted.payload = message.payload.slice(..keep);
    std::sync::Arc::make_mut(&mut fitted.headers)
        .insert(baton_proto::headers::TRUNCATED, original.as_str());
    Some(fitted)
}

/// The error for a publish to `subject` this user may not make.
pub fn forbidden(subject: &str) -> Error {
    Error::new(
        ErrorKind::Forbidden,
        format!(
            "the NATS server refused a publish to {subject}: this user's permissions do not allow it; \
             grant it (`baton permissions <role>` prints the block each role needs) or route elsewhere"
        ),
    )
}

/// The error for a publish of `message` that will not count.
pub(crate) fn failed(message: &Outgoing, failure: Failure) -> Error {
    let subject = &message.subject;
    match failure {
        Failure::Refused => forbidden(subject),
        Failure::NoStream => Error::new(
            ErrorKind::NoStream,
            format!(
                "no JetStream stream takes subject {subject}: it was deleted, or the sender uses another --prefix; \
                 start any baton worker or router to create the streams"
            ),
        ),
        Failure::TooLarge => Error::new(
            ErrorKind::TooLarge,
            format!(
                "a message to {subject} ({} bytes with its headers) is over the server's max_payload",
                message.size()
            ),
        ),
        Failure::Raced => Error::new(
            ErrorKind::Publish,
            format!("another message was written to {subject} first"),
        ),
        Failure::Other(err) => Error::with_source(
            ErrorKind::Publish,
            format!(
                "publish to {subject} (id {}) was not acknowledged after retries",
                message.id
            ),
            Failure::Other(err),
        ),
    }
}

/// A sent message whose PubAck has not been awaited yet.
pub struct Pending(Result<jetstream::context::PublishAckFuture, Failure>);

impl Pending {
    /// Waits for the PubAck: an [`ErrorKind::Publish`] error when none comes.
    pub async fn wait(self) -> Result<(), Error> {
        let acked = match self.0 {
            Ok(ack) => ack.await.map(drop).map_err(|err| error_chain(&err)),
            Err(err) => Err(error_chain(&err)),
        };
        acked.map_err(|why| Error::new(ErrorKind::Publish, why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(payload: usize) -> Outgoing {
        let mut headers = HeaderMap::new();
        headers.insert(baton_proto::headers::ERROR, "malformed");
        Outgoing {
            class: Class::DeadLetter,
            subject: "baton.dlq.a".to_owned(),
            id: Uuid::nil(),
            payload: Bytes::from(vec![7; payload]),
            headers: headers.into(),
        }
    }

    #[test]
    fn a_dead_letter_over_the_limit_is_cut_to_fit_and_says_its_size() {
        assert!(truncated(&letter(500), 1024).is_none(), "fits: unchanged");
        let cut = truncated(&letter(1024), 1024).expect("cut");
        assert!(cut.size() <= 1024, "{} bytes", cut.size());
        assert_eq!(
            cut.headers
                .get(baton_proto::headers::TRUNCATED)
                .map(|v| v.as_str().to_owned()),
            Some("1024".to_owned())
        );
        assert!(
            cut.payload.iter().all(|&b| b == 7),
            "the payload's first part"
        );
    }
}

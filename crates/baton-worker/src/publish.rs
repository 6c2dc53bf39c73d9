//! Durable, idempotent publishing: every message carries its id as
//! `Nats-Msg-Id`, and a publish counts only once its PubAck arrives.

use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::{GetStreamByNameErrorKind, PublishErrorKind};
use async_nats::jetstream::{self, message::PublishMessage};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use uuid::Uuid;

use crate::connection::Permissions;
use crate::error::{Error, ErrorKind};

/// One message to make durable.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub(crate) subject: String,
    pub(crate) id: Uuid,
    pub(crate) payload: Bytes,
    pub(crate) headers: HeaderMap,
}

impl Outgoing {
    /// The size the server counts against `max_payload`: payload and headers.
    pub(crate) fn size(&self) -> usize {
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
            .headers(self.headers.clone())
            .message_id(self.id.to_string())
    }
}

/// Publishes to JetStream and awaits PubAcks, retrying with backoff.
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    jetstream: jetstream::Context,
    client: async_nats::Client,
    permissions: Permissions,
    backoff: ExponentialBuilder,
}

/// Why one publish did not count.
#[derive(Debug)]
enum Failure {
    /// The server refused the subject: this user may not publish there.
    Refused,
    /// No stream takes the subject.
    NoStream,
    /// Anything else: a timeout, a lost connection, a stream error.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused => f.write_str("permissions violation"),
            Self::NoStream => f.write_str("no stream takes this subject"),
            Self::Other(err) => f.write_str(err),
        }
    }
}

impl std::error::Error for Failure {}

impl Publisher {
    pub(crate) fn new(jetstream: jetstream::Context, permissions: Permissions) -> Self {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(8)
            .with_jitter();
        Self {
            client: jetstream.client(),
            jetstream,
            permissions,
            backoff,
        }
    }

    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The first subject of `messages` this user may not publish to, as the
    /// server reports the user's permissions.
    pub(crate) async fn forbidden<'m>(&self, messages: &'m [Outgoing]) -> Option<&'m str> {
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
    pub(crate) async fn check_rights(
        &self,
        subjects: &[(&str, String)],
        role: &str,
    ) -> Result<(), Error> {
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
    pub(crate) async fn publish_all(&self, messages: &[Outgoing]) -> Result<(), Error> {
        let since = Instant::now();
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            pending.push(self.send(message).await);
        }
        for (message, sent) in messages.iter().zip(pending) {
            match self.acked(message, sent, since).await {
                Ok(()) => {}
                Err(Failure::Refused) => return Err(failed(message, Failure::Refused)),
                Err(err) => {
                    tracing::debug!(subject = %message.subject, id = %message.id, error = %err, "publish not acknowledged; retrying");
                    Box::pin(self.publish_one(message)).await?;
                }
            }
        }
        Ok(())
    }

    /// Publishes `messages` on core NATS, unstored: live progress that
    /// watchers may see and nothing depends on, so a failure is only logged.
    pub(crate) async fn publish_live(&self, messages: &[Outgoing]) {
        for message in messages {
            let sent = self
                .client
                .publish_with_headers(
                    message.subject.clone(),
                    message.headers.clone(),
                    message.payload.clone(),
                )
                .await;
            if let Err(err) = sent {
                tracing::debug!(subject = %message.subject, error = %err, "live progress event not sent");
            }
        }
    }

    /// Sends one message without waiting for its PubAck.
    pub(crate) async fn send(&self, message: &Outgoing) -> Pending {
        Pending(
            self.jetstream
                .send_publish(message.subject.clone(), message.publish())
                .await
                .map_err(|err| err.to_string()),
        )
    }

    /// Waits for the PubAck of `sent`, or for the server to refuse its subject.
    async fn acked(
        &self,
        message: &Outgoing,
        sent: Pending,
        since: Instant,
    ) -> Result<(), Failure> {
        let ack = match sent.0 {
            Ok(ack) => ack,
            Err(err) => return Err(Failure::Other(err)),
        };
        tokio::select! {
            acked = ack => acked.map(drop).map_err(|err| match err.kind() {
                PublishErrorKind::StreamNotFound => Failure::NoStream,
                _ => Failure::Other(err.to_string()),
            }),
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
    pub(crate) async fn publish_one(&self, message: &Outgoing) -> Result<(), Error> {
        let attempt = || async {
            let since = Instant::now();
            let sent = self.send(message).await;
            match self.acked(message, sent, since).await {
                Err(Failure::NoStream) => Err(self.confirm_no_stream(&message.subject).await),
                other => other,
            }
        };
        attempt
            .retry(self.backoff)
            .when(|err| !matches!(err, Failure::Refused | Failure::NoStream))
            .notify(|err, delay| {
                tracing::warn!(subject = %message.subject, id = %message.id, error = %err, ?delay, "publish failed; retrying");
            })
            .await
            .map_err(|err| failed(message, err))
    }
}

/// The error for a publish to `subject` this user may not make.
pub(crate) fn forbidden(subject: &str) -> Error {
    Error::new(
        ErrorKind::Forbidden,
        format!(
            "the NATS server refused a publish to {subject}: this user's permissions do not allow it; \
             grant it (`baton permissions <role>` prints the block each role needs) or route elsewhere"
        ),
    )
}

/// The error for a publish of `message` that will not count.
fn failed(message: &Outgoing, failure: Failure) -> Error {
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
pub(crate) struct Pending(Result<jetstream::context::PublishAckFuture, String>);

impl Pending {
    /// Waits for the PubAck.
    pub(crate) async fn wait(self) -> Result<(), String> {
        match self.0 {
            Ok(ack) => ack.await.map(drop).map_err(|err| err.to_string()),
            Err(err) => Err(err),
        }
    }
}

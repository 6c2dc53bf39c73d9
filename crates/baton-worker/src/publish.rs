//! Durable, idempotent publishing: every message carries its id as
//! `Nats-Msg-Id`, and a publish counts only once its PubAck arrives.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, message::PublishMessage};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use uuid::Uuid;

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
    backoff: ExponentialBuilder,
}

impl Publisher {
    pub(crate) fn new(jetstream: jetstream::Context) -> Self {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(50))
            .with_max_delay(Duration::from_secs(2))
            .with_max_times(8)
            .with_jitter();
        Self { jetstream, backoff }
    }

    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// Makes every message durable, in order.
    ///
    /// All are sent before any PubAck is awaited, so a batch costs one round
    /// trip. A message whose publish or PubAck fails is published again with
    /// the same id; JetStream drops a copy that had in fact been stored.
    pub(crate) async fn publish_all(&self, messages: &[Outgoing]) -> Result<(), Error> {
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            pending.push(
                self.jetstream
                    .send_publish(message.subject.clone(), message.publish())
                    .await,
            );
        }
        for (message, sent) in messages.iter().zip(pending) {
            let acked = match sent {
                Ok(ack) => ack.await.map(drop).map_err(|err| err.to_string()),
                Err(err) => Err(err.to_string()),
            };
            if let Err(err) = acked {
                tracing::debug!(subject = %message.subject, id = %message.id, error = %err, "publish not acknowledged; retrying");
                self.publish_one(message).await?;
            }
        }
        Ok(())
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

    /// Publishes one message, retrying with backoff until it is acknowledged.
    pub(crate) async fn publish_one(&self, message: &Outgoing) -> Result<(), Error> {
        let attempt = || async {
            let ack = self
                .jetstream
                .send_publish(message.subject.clone(), message.publish())
                .await?;
            ack.await?;
            Ok::<(), async_nats::Error>(())
        };
        attempt
            .retry(self.backoff)
            .notify(|err, delay| {
                tracing::warn!(subject = %message.subject, id = %message.id, error = %err, ?delay, "publish failed; retrying");
            })
            .await
            .map_err(|err| {
                Error::with_source(
                    ErrorKind::Publish,
                    format!("publish to {} (id {}) was not acknowledged after retries", message.subject, message.id),
                    err,
                )
            })
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

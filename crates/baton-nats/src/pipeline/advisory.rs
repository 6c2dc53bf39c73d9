//! The safety net under the delivery count: a message that JetStream stops
//! delivering because it reached its consumer's `max_deliver` would sit in
//! the work queue forever. The server says so on
//! `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`; the
//! processes of the consumer listen there (one queue group per consumer, so
//! one of them acts), dead-letter the message with `max_deliveries`, fail
//! its session and remove it from the stream.
//!
//! Workers count deliveries themselves and dead-letter a message on the
//! delivery after `max_deliveries`, which is the last one the consumer
//! allows; the advisory catches the message whose last delivery was not
//! settled either. Advisories are not stored: one sent while no process of
//! the consumer runs is lost, and its message stays in the stream.

use async_nats::HeaderMap;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use baton_proto::footprint::{Footprint, api};
use baton_proto::{AgentName, DeadLetterReason, headers};
use futures::StreamExt;
use tokio::task::JoinHandle;

use crate::nats::publish::Publisher;
use crate::pipeline::delivery::{Ending, Stored};

/// What the handler needs besides the advisory.
pub struct Net {
    pub client: async_nats::Client,
    pub publisher: Publisher,
    pub subjects: baton_proto::Subjects,
    /// The tasks stream and the consumer to watch.
    pub stream: String,
    pub consumer: String,
    /// Whose dead-letter subject is used.
    pub agent: AgentName,
    /// The worker's metrics, which count the dead letter (none for the router).
    pub metrics: Option<std::sync::Arc<dyn CountsDeadLetters>>,
}

/// The part of the advisory the net reads.
#[derive(Debug, serde::Deserialize)]
struct MaxDeliveries {
    stream_seq: u64,
    deliveries: u64,
}

impl Net {
    /// Listens until the connection closes or the handle is aborted.
    pub async fn spawn(self) -> Result<JoinHandle<()>, crate::error::Error> {
        let subject = format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{}.{}",
            self.stream, self.consumer
        );
        let group = format!("baton-advisory-{}", self.consumer);
        let mut advisories = self
            .client
            .queue_subscribe(subject.clone(), group)
            .await
            .map_err(|err| {
                crate::error::Error::with_source(
                    crate::error::ErrorKind::JetStream,
                    format!("cannot subscribe to {subject}"),
                    err,
                )
            })?;
        Ok(tokio::spawn(async move {
            while let Some(message) = advisories.next().await {
                match serde_json::from_slice::<MaxDeliveries>(&message.payload) {
                    Ok(advisory) => self.on_advisory(&advisory).await,
                    Err(err) => tracing::warn!(error = %err, "unreadable max-deliveries advisory"),
                }
            }
        }))
    }

    async fn on_advisory(&self, advisory: &MaxDeliveries) {
        let seq = advisory.stream_seq;
        let jetstream = self.publisher.jetstream();
        let stream = match jetstream.get_stream_no_info(&self.stream).await {
            Ok(stream) => stream,
            Err(err) => {
                return tracing::error!(error = %err, seq, "cannot open the tasks stream for a max-deliveries advisory");
            }
        };
        let stored = match stream.get_raw_message(seq).await {
            Ok(stored) => stored,
            // Settled or dead-lettered already (by the worker's own count).
            Err(err) if matches!(err.kind(), LastRawMessageErrorKind::NoMessageFound) => return,
            Err(err) => {
                return tracing::error!(error = %err, seq, "cannot read a message that reached max deliveries");
            }
        };
        let detail = format!(
            "delivered {} times (the consumer's max_deliver) without being settled: its worker crashed on it each time, or its outputs could not be made durable",
            advisory.deliveries
        );
        tracing::warn!(seq, subject = %stored.subject, "a message reached max deliveries; dead-lettering");
        let mut trace = HeaderMap::new();
        for name in [headers::TRACEPARENT, headers::TRACESTATE] {
            if let Some(value) = stored.headers.get(name) {
                trace.insert(name, value.as_str());
            }
        }
        let ending = Stored {
            subject: stored.subject.as_str(),
            stream_seq: seq,
            deliveries: advisory.deliveries,
            payload: &stored.payload,
        }
        .ending(
            &self.subjects,
            &self.agent,
            &trace,
            &Ending {
                reason: &DeadLetterReason::MaxDeliveries,
                detail: &detail,
                folded: None,
            },
        );
        if let Err(err) = self.publisher.publish_all(&ending).await {
            return tracing::error!(error = %err, seq, "cannot dead-letter a message that reached max deliveries; it stays in the stream");
        }
        if let Some(metrics) = &self.metrics {
            metrics.dead_lettered(&DeadLetterReason::MaxDeliveries);
        }
        if let Err(err) = stream.delete_message(seq).await {
            tracing::warn!(error = %err, seq, "dead-lettered, but could not remove the message from the stream");
        }
    }
}

/// The consumer's `max_deliver` for a delivery count of `max_deliveries`:
/// one more, so the worker sees the delivery it dead-letters.
pub fn max_deliver(max_deliveries: u32) -> i64 {
    i64::from(max_deliveries) + 1
}

/// What the net uses for consumer `consumer` of the tasks stream: its
/// max-deliveries advisory, and reading and removing the message it
/// dead-letters.
#[must_use]
pub(crate) fn footprint(subjects: &baton_proto::Subjects, consumer: &str) -> Footprint {
    let tasks = subjects.tasks_stream();
    Footprint::new()
        .publishes([
            api(format_args!("STREAM.MSG.GET.{tasks}")),
            api(format_args!("STREAM.MSG.DELETE.{tasks}")),
        ])
        .subscribes([format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{tasks}.{consumer}"
        )])
}

/// What counts the messages the net dead-letters (a worker's metrics).
pub trait CountsDeadLetters: Send + Sync {
    /// Counts one message dead-lettered with `reason`.
    fn dead_lettered(&self, reason: &DeadLetterReason);
}

//! Publish, then settle: the end of every message a worker or router
//! handles. Outputs are durable before the message is acked; what the server
//! will never take ends the message as a dead letter instead.

use async_nats::jetstream::AckKind;
use baton_proto::DeadLetterReason;

use crate::error::ErrorKind;
use crate::nats::publish::{Outgoing, Publisher, forbidden};
use crate::worker::delivery::Delivery;
use crate::worker::plan::Settle;

/// Step 6: makes `outgoing` durable, then settles.
///
/// When the server will never take an output (this user may not publish
/// to its subject, or no stream takes it), retrying cannot help: the
/// message ends instead, as a dead letter with `forbidden` or
/// `no_stream` and its session's failure. A subject the user's
/// permissions exclude is caught before anything is published. Other
/// publish failures leave the message un-acked for redelivery.
pub(crate) async fn finish(
    publisher: &Publisher,
    delivery: &Delivery<'_>,
    outgoing: &[Outgoing],
    then: Settle,
) -> Finished {
    let published = match publisher.forbidden(outgoing).await {
        // Nothing is written: no event reports what cannot happen.
        Some(subject) => Err(forbidden(subject)),
        None => publisher.publish_all(outgoing).await,
    };
    let err = match published {
        Ok(()) => {
            settle(delivery, then).await;
            return Finished::Settled;
        }
        Err(err) => err,
    };
    let reason = match err.kind() {
        ErrorKind::Forbidden => DeadLetterReason::Forbidden,
        ErrorKind::NoStream => DeadLetterReason::NoStream,
        ErrorKind::TooLarge => DeadLetterReason::TooLarge,
        _ => {
            tracing::error!(error = %err, "outputs not durable; leaving the message un-acked for redelivery");
            return Finished::Left;
        }
    };
    let detail = format!("the outcome cannot be delivered: {err}");
    tracing::error!(%reason, detail, "dead-lettering");
    let outgoing = delivery.unreadable(&reason, &detail);
    match Box::pin(publisher.publish_all(&outgoing)).await {
        Ok(()) => {
            settle(delivery, Settle::Term).await;
            Finished::Ended(reason)
        }
        Err(err) => {
            tracing::error!(error = %err, "cannot dead-letter; leaving the message un-acked for redelivery");
            Finished::Left
        }
    }
}

/// Settles the delivery (its outputs, if any, are durable).
pub(crate) async fn settle(delivery: &Delivery<'_>, settle: Settle) {
    let result = match (settle, delivery.confirms()) {
        (Settle::Ack, true) => delivery.message.double_ack().await,
        (Settle::Ack, false) => delivery.message.ack().await,
        (Settle::Nak(delay), _) => delivery.message.ack_with(AckKind::Nak(Some(delay))).await,
        (Settle::Term, true) => delivery.message.double_ack_with(AckKind::Term).await,
        (Settle::Term, false) => delivery.message.ack_with(AckKind::Term).await,
    };
    if let Err(err) = result {
        // The outputs are durable and carry deterministic ids: a redelivery
        // republishes the same ids, which JetStream drops as duplicates.
        tracing::warn!(error = %err, ?settle, "could not settle the message; it will be redelivered and deduplicated");
    }
}

/// How [`finish`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finished {
    /// The outputs are durable and the message settled as planned.
    Settled,
    /// The outputs can never be published: the message was dead-lettered
    /// with this reason and its session failed instead.
    Ended(DeadLetterReason),
    /// Nothing is settled: the message will be delivered again.
    Left,
}

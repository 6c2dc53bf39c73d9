//! Publish, then settle: the end of every message a worker or router
//! handles. Outputs are durable before the message is acked; what the server
//! will never take ends the message as a dead letter instead.

use std::time::Duration;

use async_nats::jetstream::AckKind;
use baton_proto::DeadLetterReason;

use crate::error::ErrorKind;
use crate::nats::publish::{Outgoing, Publisher, forbidden};
use crate::pipeline::delivery::Delivery;
use crate::pipeline::plan::Settle;

/// Step 6: makes `outgoing` durable, then settles.
///
/// When the server will never take an output (this user may not publish
/// to its subject, or no stream takes it), retrying cannot help: the
/// message ends instead, as a dead letter with `forbidden` or
/// `no_stream` and its session's failure. A subject the user's
/// permissions exclude is caught before anything is published. Other
/// publish failures [`leave`] the message for redelivery.
pub async fn finish(
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
            tracing::error!(error = %err, "outputs not durable");
            leave(delivery).await;
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
            tracing::error!(error = %err, "cannot dead-letter");
            leave(delivery).await;
            Finished::Left
        }
    }
}

/// Settles the delivery (its outputs, if any, are durable).
pub async fn settle(delivery: &Delivery<'_>, settle: Settle) {
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

/// The longest a message [`leave`] settles waits before it comes again.
const LEAVE_AT_MOST: Duration = Duration::from_secs(30);

/// How long a message left on its `attempt`th delivery waits before it
/// comes again: 1 s, doubling with each attempt, at most 30 s. A blip in a
/// store is over in a second; an outage is not retried hot, and a message
/// that fails on every delivery still reaches its `max_deliveries` (and its
/// dead letter) in minutes.
pub(crate) fn leave_for(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(5);
    (Duration::from_secs(1) * (1 << doublings)).min(LEAVE_AT_MOST)
}

/// Leaves `delivery` for redelivery after a failure that retrying can mend
/// (a store or publish that failed or timed out): it is nak'd to come again
/// after [`leave_for`] its attempt, rather than waiting out its `ack_wait`.
/// When even the nak cannot be sent, `ack_wait` brings it back.
pub async fn leave(delivery: &Delivery<'_>) {
    let delay = leave_for(delivery.attempt);
    tracing::warn!(
        attempt = delivery.attempt,
        ?delay,
        "leaving the message for redelivery"
    );
    settle(delivery, Settle::Nak(delay)).await;
}

/// How [`finish`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// The outputs are durable and the message settled as planned.
    Settled,
    /// The outputs can never be published: the message was dead-lettered
    /// with this reason and its session failed instead.
    Ended(DeadLetterReason),
    /// The message was [`leave`]n: it will be delivered again.
    Left,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_left_message_comes_again_after_a_second_doubling_to_at_most_thirty() {
        let waits: Vec<u64> = (1..=8).map(|a| leave_for(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(leave_for(0), Duration::from_secs(1));
        assert_eq!(leave_for(u32::MAX), LEAVE_AT_MOST);
    }
}

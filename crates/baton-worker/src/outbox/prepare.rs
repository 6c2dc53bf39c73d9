//! A plan's outputs into messages: encoded, the large ones claim-checked,
//! each checked against the server's `max_payload`.

use baton_proto::DeadLetterReason;

use super::Outbox;
use crate::decide::Output;
use crate::run::keep_alive;
use baton_nats::Error;
use baton_nats::nats::claimcheck::ClaimFailure;
use baton_nats::nats::publish::Outgoing;
use baton_nats::pipeline::delivery::Delivery;

/// Why a plan's outputs cannot be published.
pub(super) enum Unsendable {
    /// Never: the session ends with this dead-letter reason and detail.
    Permanent(DeadLetterReason, String),
    /// Not now: the message is left for redelivery.
    Transient(Error),
}

impl Outbox {
    /// Encodes `outputs`, claim-checks the large envelopes and events, and
    /// checks that every message fits the server's `max_payload`.
    pub(super) async fn prepare(
        &self,
        delivery: &Delivery<'_>,
        outputs: &[&Output],
    ) -> Result<Vec<Outgoing>, Unsendable> {
        let mut outgoing = delivery.encode(outputs.iter().copied()).map_err(|err| {
            let detail = format!("cannot encode the agent's outcome: {err}");
            Unsendable::Permanent(DeadLetterReason::Fatal, detail)
        })?;
        for (message, output) in outgoing.iter_mut().zip(outputs) {
            if matches!(output, &&Output::DeadLetter(_)) {
                continue; // A copy of a message the server already took.
            }
            self.check_out(delivery, message).await?;
        }
        Ok(outgoing)
    }

    /// Claim-checks `message` if it is large, then checks its size.
    async fn check_out(
        &self,
        delivery: &Delivery<'_>,
        message: &mut Outgoing,
    ) -> Result<(), Unsendable> {
        let payload = std::mem::take(&mut message.payload);
        let whole = payload.len();
        let checked = if self.claims.needed(whole) {
            // A large context may take a while: keep the message alive.
            let stored = self.claims.check_out(payload);
            Box::pin(keep_alive(self.progress_every, delivery, stored)).await
        } else {
            Ok(payload)
        };
        message.payload = checked.map_err(|err| match err {
            ClaimFailure::Permanent(detail) => {
                Unsendable::Permanent(DeadLetterReason::Fatal, detail)
            }
            ClaimFailure::Transient(err) => Unsendable::Transient(err),
        })?;
        if message.payload.len() < whole {
            self.metrics.claims("stored", whole - message.payload.len());
        }
        let size = message.size();
        if size > self.server_max_payload {
            let detail = format!(
                "a message to {} is {size} bytes, over the server's max_payload of {} bytes, even after the claim-check",
                message.subject, self.server_max_payload
            );
            return Err(Unsendable::Permanent(DeadLetterReason::TooLarge, detail));
        }
        Ok(())
    }
}

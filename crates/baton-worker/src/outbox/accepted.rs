//! Step 3's event: a hop's `accepted` event, folded into the hop's next
//! event when the run is quick, or else sent on its own while the run lasts
//! (stored or live by the event level).

use std::future::Future;
use std::time::Duration;

use baton_proto::Event;

use super::Outbox;
use crate::decide::Output;
use baton_nats::nats::publish::{Outgoing, Pending};
use baton_nats::pipeline::delivery::Delivery;
use baton_nats::pipeline::opening::Opened;

/// A hop's `accepted` event on its way out.
pub(crate) enum Accepting {
    /// Nothing left to do: sent live, or it could not be encoded.
    Done,
    /// Not sent yet: sent once the run lasts, or folded (then it is never
    /// encoded on its own).
    Held(Box<Event>),
    /// Sent to be stored; its PubAck is awaited before the outputs.
    Sent(Outgoing, Pending),
}

impl Outbox {
    /// The hop's `accepted` event: sent at once when `after` is zero, else
    /// held until the run has lasted `after`.
    pub(crate) async fn accepting(
        &self,
        delivery: &Delivery<'_>,
        event: Event,
        after: Duration,
    ) -> Accepting {
        if after.is_zero() {
            self.emit(delivery, &event).await
        } else {
            Accepting::Held(Box::new(event))
        }
    }

    /// Sends `event` on its own: live when the level does not store it
    /// (done), else stored, its PubAck awaited before the outputs.
    async fn emit(&self, delivery: &Delivery<'_>, event: &Event) -> Accepting {
        if self.unwanted_event(event) {
            return Accepting::Done;
        }
        let Some(message) = encoded(delivery, event) else {
            return Accepting::Done;
        };
        if !self.level.stores(&event.kind) {
            let _ = self.send_event(event, message, None).await;
            return Accepting::Done;
        }
        if let Some(opening) = delivery.opening() {
            // A root task's first stored event checks its session.
            match opening.write(&self.publisher, &message).await {
                Ok(Opened::Written | Opened::Ended(_)) => return Accepting::Done,
                Ok(Opened::Open) => {}
                Err(err) => {
                    // Sent without the check, it could write into an ended
                    // session; the outputs' first event checks it instead.
                    tracing::warn!(error = %err, "the session's first event is not durable yet; this `accepted` is left out");
                    return Accepting::Done;
                }
            }
        }
        let pending = self.publisher.send(&message).await;
        Accepting::Sent(message, pending)
    }

    /// Runs `run`; a held event is sent once the run has lasted `after`, so
    /// a long run shows where the session is.
    pub(crate) async fn during<T>(
        &self,
        accepting: &mut Accepting,
        delivery: &Delivery<'_>,
        after: Duration,
        run: impl Future<Output = T>,
    ) -> T {
        let Accepting::Held(..) = accepting else {
            return run.await;
        };
        tokio::pin!(run);
        tokio::select! {
            biased;
            done = &mut run => return done,
            () = tokio::time::sleep(after) => {}
        }
        if let Accepting::Held(event) = std::mem::replace(accepting, Accepting::Done) {
            *accepting = self.emit(delivery, &event).await;
        }
        run.await
    }

    /// Sends the event if it is still held (best effort: the message is
    /// left for redelivery anyway).
    pub(crate) async fn accepted_anyway(&self, accepting: Accepting, delivery: &Delivery<'_>) {
        if let Accepting::Held(event) = accepting {
            if self.unwanted_event(&event) {
                return;
            }
            let Some(message) = encoded(delivery, &event) else {
                return;
            };
            if let Err(err) = self
                .send_event(&event, message, delivery.opening().map(|o| &**o))
                .await
            {
                tracing::warn!(error = %err, "accepted event not stored");
            }
        }
    }

    /// Before the outputs: a held event is folded into the first event of
    /// this hop that the delivery writes (or sent, if `outputs` has none);
    /// a sent one is made durable. `false` leaves the message for
    /// redelivery.
    pub(crate) async fn accepted_before(
        &self,
        accepting: Accepting,
        delivery: &Delivery<'_>,
        outputs: &[Output],
    ) -> bool {
        let message = match accepting {
            Accepting::Done => return true,
            Accepting::Held(event) => {
                let hop = outputs.iter().any(|output| {
                    matches!(output, Output::Event(next) if next.envelope == event.envelope)
                });
                if hop {
                    delivery.fold(*event);
                    return true;
                }
                if !self.level.stores(&event.kind) {
                    self.emit(delivery, &event).await;
                    return true;
                }
                match encoded(delivery, &event) {
                    Some(message) => message,
                    None => return true,
                }
            }
            Accepting::Sent(message, pending) => {
                if pending.wait().await.is_ok() {
                    return true;
                }
                message
            }
        };
        // Publish it again (same id) before the outputs, keeping the order.
        match self.store(delivery.opening().map(|o| &**o), &message).await {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(error = %err, "accepted event not durable; leaving the message for redelivery");
                false
            }
        }
    }
}

/// `event` ready to publish; `None` (logged) when it cannot be encoded.
fn encoded(delivery: &Delivery<'_>, event: &Event) -> Option<Outgoing> {
    delivery
        .event(event)
        .map_err(|err| tracing::warn!(error = %err, "cannot encode the accepted event"))
        .ok()
}

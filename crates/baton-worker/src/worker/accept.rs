//! Step 3 of the worker loop: a hop's `accepted` event, folded into the
//! hop's next event when the run is quick, or else sent on its own while the
//! run lasts: stored at the `full` event level, live at `lean`.

use std::future::Future;

use baton_proto::Event;

use crate::nats::publish::{Outgoing, Pending};
use crate::worker::delivery::Delivery;
use crate::worker::plan::Output;
use crate::worker::runtime::Runtime;

/// A hop's `accepted` event on its way out, by the event level.
pub(crate) enum Accepting {
    /// Nothing left to do: sent live (`lean`), or it could not be encoded.
    Done,
    /// Not sent yet: sent once the run lasts (stored at `full`, live at
    /// `lean`), or folded (then it is never encoded on its own).
    Held(Box<Event>),
    /// Sent (`full`); its PubAck is awaited before the outputs.
    Sent(Outgoing, Pending),
}

impl Accepting {
    pub(crate) async fn new(rt: &Runtime, delivery: &Delivery<'_>, event: Event) -> Self {
        if rt.config.accepted_after.is_zero() {
            Self::emit(rt, delivery, &event).await
        } else {
            Self::Held(Box::new(event))
        }
    }

    /// Sends `event` on its own: live at the `lean` level (done), stored at
    /// `full` (its PubAck awaited before the outputs).
    async fn emit(rt: &Runtime, delivery: &Delivery<'_>, event: &Event) -> Self {
        let Some(mut message) = encoded(delivery, event) else {
            return Self::Done;
        };
        if rt.config.events == crate::EventLevel::Lean {
            message.subject = rt.config.subjects.live(event.session);
            rt.publisher
                .publish_live(std::slice::from_ref(&message))
                .await;
            return Self::Done;
        }
        let pending = rt.publisher.send(&message).await;
        Self::Sent(message, pending)
    }

    /// Runs `run`; a held event is sent once the run has lasted
    /// `accepted_after`, so a long run shows where the session is.
    pub(crate) async fn during<T>(
        &mut self,
        rt: &Runtime,
        delivery: &Delivery<'_>,
        run: impl Future<Output = T>,
    ) -> T {
        let Self::Held(..) = self else {
            return run.await;
        };
        tokio::pin!(run);
        tokio::select! {
            biased;
            done = &mut run => return done,
            () = tokio::time::sleep(rt.config.accepted_after) => {}
        }
        if let Self::Held(event) = std::mem::replace(self, Self::Done) {
            *self = Self::emit(rt, delivery, &event).await;
        }
        run.await
    }

    /// Sends the event if it is still held, stored at `full` (best effort:
    /// the message is left for redelivery anyway), live at `lean`.
    pub(crate) async fn store(self, rt: &Runtime, delivery: &Delivery<'_>) {
        if let Self::Held(event) = self {
            if rt.config.events == crate::EventLevel::Lean {
                Self::emit(rt, delivery, &event).await;
                return;
            }
            let Some(message) = encoded(delivery, &event) else {
                return;
            };
            if let Err(err) = rt.publisher.publish_one(&message).await {
                tracing::warn!(error = %err, "accepted event not stored");
            }
        }
    }

    /// Before the outputs: a held event is folded into the first event of
    /// this hop that the delivery writes (or stored, if `outputs` has none);
    /// a sent one is made durable. `false` leaves the message for
    /// redelivery.
    pub(crate) async fn finish(
        self,
        rt: &Runtime,
        delivery: &Delivery<'_>,
        outputs: &[Output],
    ) -> bool {
        let message = match self {
            Self::Done => return true,
            Self::Held(event) => {
                let hop = outputs.iter().any(|output| {
                    matches!(output, Output::Event(next) if next.envelope == event.envelope)
                });
                if hop {
                    delivery.fold(*event);
                    return true;
                }
                if rt.config.events == crate::EventLevel::Lean {
                    Self::emit(rt, delivery, &event).await;
                    return true;
                }
                match encoded(delivery, &event) {
                    Some(message) => message,
                    None => return true,
                }
            }
            Self::Sent(message, pending) => {
                if pending.wait().await.is_ok() {
                    return true;
                }
                message
            }
        };
        // Publish it again (same id) before the outputs, keeping the order.
        match rt.publisher.publish_one(&message).await {
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

//! A client's live relay through the router: for a NATS user that may not
//! subscribe to a session's live subject, the router relays the session's
//! live events (progress at the `lean` level, the pieces of answers being
//! written) to the client's inbox, in windows that overlap, so that none
//! falls between two of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use baton_proto::{Event, ReadReply, ReadRequest, Subjects, Wire};
use futures::StreamExt;
use tokio::sync::mpsc;
use uuid::Uuid;

/// How long one relay lasts, and how long before its end the next one is
/// asked for.
const RELAY: Duration = Duration::from_secs(10);
const OVERLAP: Duration = Duration::from_secs(2);
/// How long the router has to say a relay listens.
const ANSWER: Duration = Duration::from_secs(5);

/// What asking for a relay came to.
enum Opened {
    /// It listens; its replies come on this subscription.
    Relay(async_nats::Subscriber),
    /// The router answered with a plain read: it does not relay.
    Unsupported,
    /// No answer (no router, or one restarting).
    Failed,
}

/// The live events of `session`, relayed by the router, for as long as the
/// receiver is kept. The first relay listens when this returns (when the
/// router relays), so a session sent after it misses nothing. `relaying`
/// is true while a relay listens, so that a reader can leave the live
/// events its reads also return to the relay.
pub(crate) async fn live(
    client: &async_nats::Client,
    subjects: &Subjects,
    session: Uuid,
    relaying: Arc<AtomicBool>,
) -> mpsc::UnboundedReceiver<Event> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let client = client.clone();
    let subject = subjects.session_read(session);
    let mut opened = open(&client, &subject).await;
    tokio::spawn(async move {
        loop {
            let pause = match opened {
                Opened::Relay(relay) => {
                    relaying.store(true, Ordering::Relaxed);
                    tokio::spawn(forward(relay, sender.clone()));
                    RELAY - OVERLAP
                }
                Opened::Unsupported => {
                    relaying.store(false, Ordering::Relaxed);
                    return;
                }
                Opened::Failed => {
                    relaying.store(false, Ordering::Relaxed);
                    Duration::from_secs(1)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = sender.closed() => return,
            }
            opened = open(&client, &subject).await;
        }
    });
    receiver
}

/// Asks the router for a relay, and waits until it listens.
async fn open(client: &async_nats::Client, subject: &str) -> Opened {
    let request = ReadRequest {
        live_ms: u64::try_from(RELAY.as_millis()).unwrap_or(u64::MAX),
        ..ReadRequest::default()
    };
    let Ok(payload) = request.to_msgpack() else {
        return Opened::Failed;
    };
    let inbox = client.new_inbox();
    let Ok(mut replies) = client.subscribe(inbox.clone()).await else {
        return Opened::Failed;
    };
    let asked = client
        .publish_with_reply(subject.to_owned(), inbox, payload.into())
        .await;
    if asked.is_err() {
        return Opened::Failed;
    }
    match tokio::time::timeout(ANSWER, replies.next()).await {
        Ok(Some(first)) => match ReadReply::from_msgpack(&first.payload) {
            Ok(reply) if reply.live && reply.error.is_none() => Opened::Relay(replies),
            Ok(reply) if reply.error.is_some() => Opened::Failed,
            _ => Opened::Unsupported,
        },
        _ => Opened::Failed,
    }
}

/// Passes a relay's events on until it ends (or goes quiet past its end),
/// or nobody reads them.
async fn forward(mut relay: async_nats::Subscriber, sender: mpsc::UnboundedSender<Event>) {
    let until = tokio::time::Instant::now() + RELAY + ANSWER;
    while let Ok(Some(message)) = tokio::time::timeout_at(until, relay.next()).await {
        let Ok(reply) = ReadReply::from_msgpack(&message.payload) else {
            continue;
        };
        for read in reply.events {
            if sender.send(read.event).is_err() {
                return;
            }
        }
        if reply.live_end || reply.error.is_some() {
            return;
        }
    }
}

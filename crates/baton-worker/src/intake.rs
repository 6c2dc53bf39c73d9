//! The pull loop shared by workers and the router.
//!
//! One long-lived inbox subscription receives the messages of every pull
//! request. A request never asks for more messages than there are free
//! concurrency permits minus those already requested, so a message never
//! waits in a local buffer while its `ack_wait` runs out. (async-nats's batch
//! API would open and close a subscription per request: a SUB, an UNSUB and a
//! request for every one or two messages under load.)

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_nats::{StatusCode, Subscriber};
use futures::StreamExt;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How the loop pulls and stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntakeSettings {
    pub(crate) concurrency: usize,
    pub(crate) pull_expires: Duration,
    pub(crate) shutdown_grace: Duration,
}

/// Where to pull from.
pub(crate) struct Source {
    pub(crate) client: async_nats::Client,
    pub(crate) jetstream: jetstream::Context,
    pub(crate) stream: String,
    pub(crate) consumer: String,
}

/// Pull requests in flight: how many messages were asked for and not yet received.
struct Requested {
    count: usize,
    last_request: Instant,
}

/// Pulls until `shutdown` resolves, lets in-flight work finish within the
/// grace period, then flushes the connection so the last acks are sent.
pub(crate) async fn serve<H, F>(
    source: Source,
    settings: IntakeSettings,
    shutdown: impl Future<Output = ()> + Send,
    handler: H,
) where
    H: Fn(jetstream::Message) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let client = source.client.clone();
    let token = CancellationToken::new();
    let trigger = token.clone();
    let run = run(source, settings, token, handler);
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => {}
        () = shutdown => {
            trigger.cancel();
            run.await;
        }
    }
    if let Err(err) = client.flush().await {
        tracing::warn!(error = %err, "could not flush the connection on shutdown");
    }
}

/// Pulls until `shutdown`, then lets in-flight work finish within the grace period.
///
/// Messages that arrive for an outstanding pull after shutdown are Nak'ed so
/// another replica gets them at once; work still running when the grace period
/// ends is abandoned un-acked and redelivered after `ack_wait`.
async fn run<H, F>(
    source: Source,
    settings: IntakeSettings,
    shutdown: CancellationToken,
    handler: H,
) where
    H: Fn(jetstream::Message) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let concurrency = settings.concurrency.max(1);
    let semaphore = Arc::new(Semaphore::new(concurrency));
    let freed = Arc::new(Notify::new());
    let mut tasks = JoinSet::new();
    let inbox_subject = source.client.new_inbox();
    let mut inbox = loop {
        match source.client.subscribe(inbox_subject.clone()).await {
            Ok(inbox) => break inbox,
            Err(err) => {
                tracing::warn!(error = %err, "cannot subscribe to a pull inbox; trying again");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        }
    };
    let next_subject = format!(
        "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
        source.stream, source.consumer
    );
    let mut requested = Requested {
        count: 0,
        last_request: Instant::now(),
    };
    let stale_after = settings.pull_expires + Duration::from_secs(2);
    let refill_at = (concurrency / 4).max(1);
    // Set when a pull request could not be sent (e.g. while reconnecting).
    let mut retry_at: Option<Instant> = None;

    loop {
        while tasks.try_join_next().is_some() {}
        let want = semaphore
            .available_permits()
            .saturating_sub(requested.count);
        // Ask again once a quarter of the permits is free (at once when nothing
        // is requested): one pull request per message would double the
        // server's work under load, for no gain in latency.
        let worth_asking = want > 0 && (requested.count == 0 || want >= refill_at);
        if worth_asking && retry_at.is_none_or(|at| at <= Instant::now()) {
            retry_at = None;
            let body = format!(
                r#"{{"batch":{want},"expires":{}}}"#,
                settings.pull_expires.as_nanos()
            );
            match source
                .client
                .publish_with_reply(next_subject.clone(), inbox_subject.clone(), body.into())
                .await
            {
                Ok(()) => {
                    requested.count += want;
                    requested.last_request = Instant::now();
                }
                Err(err) => {
                    tracing::warn!(error = %err, "pull request failed; trying again");
                    retry_at = Some(Instant::now() + Duration::from_millis(250));
                }
            }
        }
        let stale = requested.last_request + stale_after;
        tokio::select! {
            message = inbox.next() => {
                let Some(message) = message else {
                    tracing::warn!("pull inbox closed");
                    break;
                };
                match message.status {
                    None | Some(StatusCode::OK) => {
                        requested.count = requested.count.saturating_sub(1);
                        let message = jetstream::Message { message, context: source.jetstream.clone() };
                        let Ok(permit) = semaphore.clone().try_acquire_owned() else {
                            // Only after a lost status reset the count: hand it back at once.
                            let _ = message.ack_with(AckKind::Nak(None)).await;
                            continue;
                        };
                        let work = handler(message);
                        let freed = freed.clone();
                        tasks.spawn(async move {
                            work.await;
                            drop(permit);
                            freed.notify_one();
                        });
                    }
                    Some(StatusCode::IDLE_HEARTBEAT) => {}
                    Some(status) => {
                        // 408 (request expired) and 409 (e.g. max waiting) end a request:
                        // what it did not deliver is no longer requested.
                        let pending = pending_messages(&message);
                        requested.count = match pending {
                            Some(pending) => requested.count.saturating_sub(pending),
                            None => 0,
                        };
                        if status != StatusCode::TIMEOUT {
                            tracing::debug!(%status, description = ?message.description, "pull request ended");
                        }
                    }
                }
            }
            () = freed.notified() => {}
            () = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
            () = tokio::time::sleep_until(stale), if requested.count > 0 => {
                // A status was lost (e.g. across a reconnect): start counting afresh.
                requested.count = 0;
            }
            () = shutdown.cancelled() => break,
        }
    }

    // Outstanding requests may still deliver: hand those messages back at once.
    let drain_until = requested.last_request + stale_after;
    tasks.spawn(drain(
        inbox,
        source.jetstream.clone(),
        requested.count,
        drain_until,
    ));
    let in_flight = tasks.len() - 1;
    if in_flight > 0 {
        tracing::info!(in_flight, grace = ?settings.shutdown_grace, "shutting down: finishing in-flight work");
    }
    let finished = tokio::time::timeout(settings.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            abandoned = tasks.len(),
            "grace period over: unfinished messages stay un-acked for redelivery"
        );
        tasks.abort_all();
    }
}

/// Naks messages of requests still open at shutdown, until they have all ended.
async fn drain(
    mut inbox: Subscriber,
    context: jetstream::Context,
    mut requested: usize,
    until: Instant,
) {
    while requested > 0 {
        match tokio::time::timeout_at(until, inbox.next()).await {
            Ok(Some(message)) => match message.status {
                None | Some(StatusCode::OK) => {
                    requested -= 1;
                    let message = jetstream::Message {
                        message,
                        context: context.clone(),
                    };
                    if let Err(err) = message.ack_with(AckKind::Nak(None)).await {
                        tracing::debug!(error = %err, "could not hand back a message; it is redelivered after ack_wait");
                    }
                }
                Some(StatusCode::IDLE_HEARTBEAT) => {}
                Some(_) => {
                    requested =
                        requested.saturating_sub(pending_messages(&message).unwrap_or(requested))
                }
            },
            _ => break,
        }
    }
    let _ = inbox.unsubscribe().await;
}

fn pending_messages(message: &async_nats::Message) -> Option<usize> {
    message
        .headers
        .as_ref()?
        .get("Nats-Pending-Messages")?
        .as_str()
        .parse()
        .ok()
}

//! The pull loop shared by workers and the router: pull no more messages than
//! there are free permits, hand each to a task, and stop gracefully.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How the loop pulls and stops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IntakeSettings {
    pub(crate) concurrency: usize,
    pub(crate) pull_expires: Duration,
    pub(crate) shutdown_grace: Duration,
}

/// Pulls until `shutdown`, then lets in-flight work finish within the grace period.
///
/// Messages that arrive for an outstanding pull after shutdown are Nak'ed so
/// another replica gets them at once; work still running when the grace period
/// ends is abandoned un-acked and redelivered after `ack_wait`.
pub(crate) async fn run<H, F>(consumer: PullConsumer, settings: IntakeSettings, shutdown: CancellationToken, handler: H)
where
    H: Fn(jetstream::Message, OwnedSemaphorePermit) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let semaphore = Arc::new(Semaphore::new(settings.concurrency.max(1)));
    let mut tasks = JoinSet::new();
    let mut failures = 0u32;
    'pull: loop {
        while tasks.try_join_next().is_some() {}
        let first = tokio::select! {
            permit = semaphore.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let mut permits = vec![first];
        while let Ok(permit) = semaphore.clone().try_acquire_owned() {
            permits.push(permit);
        }
        let request = consumer.batch().max_messages(permits.len()).expires(settings.pull_expires).messages();
        let mut batch = tokio::select! {
            batch = request => match batch {
                Ok(batch) => { failures = 0; batch }
                Err(err) => {
                    failures += 1;
                    let delay = Duration::from_millis(100 * u64::from(failures.min(50)));
                    tracing::warn!(error = %err, ?delay, "pull request failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            },
            () = shutdown.cancelled() => break,
        };
        loop {
            tokio::select! {
                next = batch.next() => match next {
                    Some(Ok(message)) => {
                        let Some(permit) = permits.pop() else {
                            // The server never sends more than requested; if it did, let another replica have it.
                            let _ = message.ack_with(AckKind::Nak(None)).await;
                            continue;
                        };
                        tasks.spawn(handler(message, permit));
                    }
                    Some(Err(err)) => {
                        tracing::debug!(error = %err, "pull batch ended with a status");
                        break;
                    }
                    None => break,
                },
                () = shutdown.cancelled() => {
                    tasks.spawn(async move {
                        while let Ok(Some(Ok(message))) = tokio::time::timeout(Duration::from_millis(200), batch.next()).await {
                            let _ = message.ack_with(AckKind::Nak(None)).await;
                        }
                    });
                    break 'pull;
                }
            }
        }
    }
    let in_flight = tasks.len();
    if in_flight > 0 {
        tracing::info!(in_flight, grace = ?settings.shutdown_grace, "shutting down: finishing in-flight work");
    }
    let finished = tokio::time::timeout(settings.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(abandoned = tasks.len(), "grace period over: unfinished messages stay un-acked for redelivery");
        tasks.abort_all();
    }
}

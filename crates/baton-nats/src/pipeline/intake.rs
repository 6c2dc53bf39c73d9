//! The pull loop shared by workers and the router.
//!
//! One long-lived inbox subscription receives the messages of every pull
//! request. A request never asks for more messages than there are free
//! concurrency permits minus those already requested, so a message never
//! waits in a local buffer while its `ack_wait` runs out. (async-nats's batch
//! API would open and close a subscription per request: a SUB, an UNSUB and a
//! request for every one or two messages under load.)

use baton_proto::footprint::Footprint;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use async_nats::{StatusCode, Subscriber};
use futures::StreamExt;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod stopping;

use stopping::{finish, flush};

/// How the loop pulls and stops.
#[derive(Debug, Clone, Copy)]
pub struct IntakeSettings {
    pub concurrency: usize,
    pub pull_expires: Duration,
    pub shutdown_grace: Duration,
}

/// Where to pull from.
pub struct Source {
    pub client: async_nats::Client,
    pub jetstream: jetstream::Context,
    pub stream: String,
    pub consumer: String,
}

impl Source {
    /// The durable consumer `consumer` of the tasks stream on `filter`,
    /// created if missing, as a source to pull from.
    pub async fn tasks(
        client: &async_nats::Client,
        jetstream: &jetstream::Context,
        subjects: &baton_proto::Subjects,
        consumer: &str,
        filter: String,
        ack_wait: Duration,
        max_deliver: i64,
    ) -> Result<Self, crate::error::Error> {
        crate::nats::provision::task_consumer(
            jetstream,
            subjects,
            consumer,
            filter,
            ack_wait,
            max_deliver,
        )
        .await?;
        Ok(Self {
            client: client.clone(),
            jetstream: jetstream.clone(),
            stream: subjects.tasks_stream(),
            consumer: consumer.to_owned(),
        })
    }
}

/// Pulls until `shutdown` resolves, lets in-flight work finish within the
/// grace period, then flushes the connection so the last acks are sent.
pub async fn serve<H, F>(
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
    flush(&client).await;
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
    let Some(mut inbox) = subscribe(&source.client, &inbox_subject, &shutdown).await else {
        return;
    };
    let mut puller = Puller::new(&source, &settings, inbox_subject, concurrency);
    // How often the loop looks for a reconnect.
    let mut watch = tokio::time::interval(Duration::from_millis(200));
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        while tasks.try_join_next().is_some() {}
        puller.ask(semaphore.available_permits()).await;
        let stale = puller.stale_at();
        tokio::select! {
            message = inbox.next() => {
                let Some(message) = message else {
                    tracing::warn!("pull inbox closed");
                    break;
                };
                puller.last_news = Instant::now();
                if puller.delivered(&message) {
                    let message = jetstream::Message { message, context: source.jetstream.clone() };
                    admit(message, &semaphore, &freed, &mut tasks, &handler).await;
                }
            }
            () = freed.notified() => {}
            () = tokio::time::sleep_until(puller.retry_at.unwrap_or_else(Instant::now)), if puller.retry_at.is_some() => {}
            () = tokio::time::sleep_until(stale), if puller.count > 0 => {
                // A status was lost, or the requests with a consumer
                // leader: start counting afresh.
                tracing::debug!(consumer = %source.consumer, "pull requests silent: pulling again");
                puller.count = 0;
            }
            _ = watch.tick() => {
                if puller.reconnected() && puller.count > 0 {
                    // A restarted server forgot the requests: ask again now,
                    // not when they would have expired. (A surplus from a
                    // cluster node that kept them is handed back.)
                    tracing::info!(consumer = %source.consumer, "reconnected: pulling again");
                    puller.count = 0;
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    // Outstanding requests may still deliver: hand those messages back at once.
    let drain_until = puller.last_request + puller.stale_after();
    let draining = tokio::spawn(drain(
        inbox,
        source.jetstream.clone(),
        puller.count,
        drain_until,
    ));
    finish(&source.client, tasks, draining, settings.shutdown_grace).await;
}

impl Puller {
    /// A puller of `source`'s consumer whose messages arrive on `inbox`.
    fn new(source: &Source, settings: &IntakeSettings, inbox: String, concurrency: usize) -> Self {
        Self {
            client: source.client.clone(),
            next: format!(
                "$JS.API.CONSUMER.MSG.NEXT.{}.{}",
                source.stream, source.consumer
            ),
            inbox,
            expires: settings.pull_expires,
            refill_at: (concurrency / 2).max(1),
            count: 0,
            last_request: Instant::now(),
            last_news: Instant::now(),
            retry_at: None,
            connects: source.client.statistics().connects.load(Ordering::Relaxed),
        }
    }
}

/// Hands `message` to `handler` on a task of its own, holding a permit
/// while it runs; without a free permit it goes back at once.
async fn admit<H, F>(
    message: jetstream::Message,
    semaphore: &Arc<Semaphore>,
    freed: &Arc<Notify>,
    tasks: &mut JoinSet<()>,
    handler: &H,
) where
    H: Fn(jetstream::Message) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let Ok(permit) = semaphore.clone().try_acquire_owned() else {
        // Only after a lost status reset the count: hand it back at once.
        let _ = message.ack_with(AckKind::Nak(None)).await;
        return;
    };
    let work = handler(message);
    let freed = freed.clone();
    tasks.spawn(async move {
        work.await;
        drop(permit);
        freed.notify_one();
    });
}

/// The subscription that receives the messages of every pull request,
/// retried until it works or `shutdown`.
async fn subscribe(
    client: &async_nats::Client,
    subject: &str,
    shutdown: &CancellationToken,
) -> Option<Subscriber> {
    loop {
        match client.subscribe(subject.to_owned()).await {
            Ok(inbox) => return Some(inbox),
            Err(err) => {
                tracing::warn!(error = %err, "cannot subscribe to a pull inbox; trying again");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    () = shutdown.cancelled() => return None,
                }
            }
        }
    }
}

/// The longest interval between a waiting pull request's heartbeats.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Pull requests of one consumer: how many messages were asked for and not
/// yet received, and when to ask again.
struct Puller {
    client: async_nats::Client,
    /// `$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`.
    next: String,
    /// Where the messages of every request arrive.
    inbox: String,
    expires: Duration,
    /// Ask again once this many permits are free.
    refill_at: usize,
    count: usize,
    last_request: Instant,
    /// When the last message or heartbeat of a request arrived.
    last_news: Instant,
    /// Set when a pull request could not be sent (e.g. while reconnecting).
    retry_at: Option<Instant>,
    /// The connection's connect count when the requests were sent.
    connects: u64,
}

impl Puller {
    /// Whether the connection reconnected since the requests were sent;
    /// the count moves on, so one reconnect is reported once.
    fn reconnected(&mut self) -> bool {
        let now = self.client.statistics().connects.load(Ordering::Relaxed);
        std::mem::replace(&mut self.connects, now) != now
    }

    /// After this long without news, outstanding requests count as lost.
    fn stale_after(&self) -> Duration {
        self.expires + Duration::from_secs(2)
    }

    /// How often the server says an open request is alive while it has
    /// nothing to deliver.
    fn heartbeat(&self) -> Duration {
        (self.expires / 4).clamp(Duration::from_millis(100), HEARTBEAT)
    }

    /// When outstanding requests count as lost: three heartbeats without
    /// news (a consumer's leader died with them, and its successor does
    /// not know them), or their expiry passed without the server saying so.
    fn stale_at(&self) -> Instant {
        let silent = self.last_news.max(self.last_request) + self.heartbeat() * 3;
        silent.min(self.last_request + self.stale_after())
    }

    /// Asks for as many messages as there are free permits not yet asked for.
    async fn ask(&mut self, free: usize) {
        let want = to_ask(free, self.count, self.refill_at);
        if want == 0 || self.retry_at.is_some_and(|at| at > Instant::now()) {
            return;
        }
        self.retry_at = None;
        let body = format!(
            r#"{{"batch":{want},"expires":{},"idle_heartbeat":{}}}"#,
            self.expires.as_nanos(),
            self.heartbeat().as_nanos()
        );
        match self
            .client
            .publish_with_reply(self.next.clone(), self.inbox.clone(), body.into())
            .await
        {
            Ok(()) => {
                self.count += want;
                self.last_request = Instant::now();
            }
            Err(err) => {
                tracing::warn!(error = %err, "pull request failed; trying again");
                self.retry_at = Some(Instant::now() + Duration::from_millis(250));
            }
        }
    }

    /// Accounts for `message`; `true` when it is a message to handle, not a status.
    fn delivered(&mut self, message: &async_nats::Message) -> bool {
        match message.status {
            None | Some(StatusCode::OK) => {
                self.count = self.count.saturating_sub(1);
                true
            }
            Some(StatusCode::IDLE_HEARTBEAT) => false,
            Some(status) => {
                // 408 (request expired) and 409 (e.g. max waiting) end a request:
                // what it did not deliver is no longer requested.
                self.count = match pending_messages(message) {
                    Some(pending) => self.count.saturating_sub(pending),
                    None => 0,
                };
                if status != StatusCode::TIMEOUT {
                    tracing::debug!(%status, description = ?message.description, "pull request ended");
                }
                false
            }
        }
    }
}

/// How many messages to ask for with `free` permits and `count` asked for
/// and not yet received: the free permits not asked for, once they reach
/// `refill_at` (half the concurrency), or at once when nothing is asked
/// for. One pull request per message would double the server's work under
/// load, for no gain in latency: while anything is asked for, a new message
/// is delivered without waiting for a request. (Half, as JetStream's own
/// clients refill a batch.) Never more than the free permits.
fn to_ask(free: usize, count: usize, refill_at: usize) -> usize {
    let want = free.saturating_sub(count);
    if want > 0 && (count == 0 || want >= refill_at) {
        want
    } else {
        0
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

/// What pulling from durable consumer `consumer` of the tasks stream uses,
/// the net for its unsettled messages included.
#[must_use]
pub fn footprint(subjects: &baton_proto::Subjects, consumer: &str) -> Footprint {
    Footprint::puller(&subjects.tasks_stream(), consumer)
        .with(crate::pipeline::advisory::footprint(subjects, consumer))
}

#[cfg(test)]
mod tests {
    use super::to_ask;

    #[test]
    fn a_worker_asks_in_batches_of_half_its_concurrency_and_never_beyond_its_free_permits() {
        // Nothing asked for: every free permit, at once (no latency at low load).
        assert_eq!(to_ask(32, 0, 16), 32);
        assert_eq!(to_ask(1, 0, 16), 1);
        // Something asked for: wait until half the concurrency is free.
        assert_eq!(to_ask(32, 17, 16), 0);
        assert_eq!(to_ask(32, 16, 16), 16);
        assert_eq!(to_ask(30, 10, 16), 20);
        // Never more than the permits: everything busy or asked for.
        assert_eq!(to_ask(0, 0, 16), 0);
        assert_eq!(to_ask(8, 8, 16), 0);
        assert_eq!(to_ask(4, 9, 16), 0);
        // Concurrency 1: one at a time.
        assert_eq!(to_ask(1, 0, 1), 1);
        assert_eq!(to_ask(1, 1, 1), 0);
    }
}

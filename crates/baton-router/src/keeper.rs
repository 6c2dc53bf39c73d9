//! The router's keeper: it closes turns that ended, starts the messages
//! queued behind them, sends again a turn whose starter crashed before
//! its task was durable, and removes conversations idle for their time to
//! live (see `state/conversation/expiry.rs`). It closes them with the entry
//! point's own closing, so a turn ends the same way whoever sees it end.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use baton_proto::Conversation;
use futures::StreamExt;

use baton_client::conversation::Conversations;

/// Closes the running turn of each of the conversations under `keys`
/// whose turn ended, and sends again a turn that shows no event long after it
/// started. Returns how many turns it started or sent again.
async fn sweep(conversations: &Conversations, keys: &[String]) -> usize {
    let mut moved = 0;
    for key in keys {
        match conversations.keep_one(key).await {
            Ok(n) => moved += n,
            Err(err) => {
                tracing::warn!(conversation = %key, error = %err, "cannot close a conversation's turn")
            }
        }
    }
    moved
}

/// Follows the bucket into `seen`: which conversations have a running
/// turn, as their records are written. A lost watch is started again,
/// from each key's last record.
async fn follow(conversations: &Conversations, seen: Arc<Mutex<Seen>>) {
    loop {
        match conversations.records().watch().await {
            Ok(mut watch) => {
                while let Some(Ok(entry)) = watch.next().await {
                    let record = (entry.operation == kv::Operation::Put)
                        .then(|| rmp_serde::from_slice::<Conversation>(&entry.value).ok())
                        .flatten();
                    let marker = (entry.operation == kv::Operation::Delete).then(|| {
                        u64::try_from(entry.created.unix_timestamp_nanos() / 1_000_000)
                            .unwrap_or_default()
                    });
                    seen.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .note(entry.key, record.as_ref(), marker);
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot watch the conversations"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// What the keeper knows of the conversations from watching their records.
#[derive(Default)]
struct Seen {
    /// Those with a running turn.
    running: BTreeSet<String>,
    /// Messages queued, by conversation (those with any).
    queued: HashMap<String, usize>,
    /// Turns started, by conversation, as last seen.
    turns: HashMap<String, u32>,
    /// Conversations where nothing runs or waits, with when their record
    /// last changed, unix ms.
    idle: HashMap<String, u64>,
    /// Deleted conversations' markers, with when they were written, unix ms.
    markers: HashMap<String, u64>,
    /// When the keeper started, unix ms: turns of conversations created
    /// before are not counted as started now.
    since: u64,
}

impl Seen {
    /// Notes `record`, just written at `key` (`None`: deleted, or not a
    /// record; `marker`: when a delete left its marker), and counts the
    /// turns it started since last seen.
    fn note(&mut self, key: String, record: Option<&Conversation>, marker: Option<u64>) {
        let Some(record) = record else {
            self.forget(&key);
            if let Some(at) = marker {
                self.markers.insert(key, at);
            }
            return;
        };
        self.markers.remove(&key);
        if record.running.is_none() && record.queue.is_empty() {
            self.idle.insert(key.clone(), record.updated_at);
        } else {
            self.idle.remove(&key);
        }
        if record.running.is_some() {
            self.running.insert(key.clone());
        } else {
            self.running.remove(&key);
        }
        if record.queue.is_empty() {
            self.queued.remove(&key);
        } else {
            self.queued.insert(key.clone(), record.queue.len());
        }
        let before = match self.turns.get(&key) {
            Some(before) => *before,
            None if record.created_at >= self.since => 0,
            None => record.turns,
        };
        self.turns.insert(key, record.turns);
        turns_counter().add(u64::from(record.turns.saturating_sub(before)), &[]);
    }

    /// Forgets the conversation at `key` (removed).
    fn forget(&mut self, key: &str) {
        self.running.remove(key);
        self.queued.remove(key);
        self.turns.remove(key);
        self.idle.remove(key);
        self.markers.remove(key);
    }

    /// The conversations idle for `ttl` or longer, and the markers kept as
    /// long (each with `true`).
    fn expired(&self, ttl: Duration) -> Vec<(String, bool)> {
        let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let now = baton_proto::now_ms();
        let old = |at: &u64| now.saturating_sub(*at) >= ttl;
        let idle = (self.idle.iter())
            .filter(|(_, at)| old(at))
            .map(|(key, _)| (key.clone(), false));
        let markers = (self.markers.iter())
            .filter(|(_, at)| old(at))
            .map(|(key, _)| (key.clone(), true));
        idle.chain(markers).collect()
    }
}

/// Conversation turns started, made when first used (after the process
/// set its meter provider).
fn turns_counter() -> &'static opentelemetry::metrics::Counter<u64> {
    static TURNS: std::sync::OnceLock<opentelemetry::metrics::Counter<u64>> =
        std::sync::OnceLock::new();
    TURNS.get_or_init(|| {
        baton_nats::meter::meter()
            .u64_counter("baton.conversation.turns")
            .with_description(
                "Conversation turns started, as the router's keeper saw their records",
            )
            .build()
    })
}

/// The gauges of what `seen` holds, read when collected.
fn gauges(seen: &Arc<Mutex<Seen>>) {
    let meter = baton_nats::meter::meter();
    let active = Arc::clone(seen);
    meter
        .i64_observable_gauge("baton.conversations.active")
        .with_description("Conversations with a running turn")
        .with_callback(move |gauge| {
            let seen = active
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            gauge.observe(i64::try_from(seen.running.len()).unwrap_or(i64::MAX), &[]);
        })
        .build();
    let queued = Arc::clone(seen);
    meter
        .i64_observable_gauge("baton.conversation.queued")
        .with_description("Messages waiting behind a running turn, in every conversation")
        .with_callback(move |gauge| {
            let seen = queued
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let total: usize = seen.queued.values().sum();
            gauge.observe(i64::try_from(total).unwrap_or(i64::MAX), &[]);
        })
        .build();
}

/// Closes conversations' ended turns every `every` until `stop` is cancelled (the
/// router runs it): those with a running turn, which it learns by watching
/// the bucket, so a tick costs what runs, not every conversation kept. It
/// removes those idle for `ttl`, and deleted ones' markers `ttl` after the
/// delete. It also measures them: active conversations, queued messages,
/// turns.
pub(crate) async fn keep(
    conversations: Conversations,
    every: Duration,
    ttl: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let seen = Arc::new(Mutex::new(Seen {
        since: baton_proto::now_ms(),
        ..Seen::default()
    }));
    gauges(&seen);
    let watcher = conversations.clone();
    let watching = tokio::spawn({
        let seen = seen.clone();
        async move { follow(&watcher, seen).await }
    });
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expiry = tokio::time::interval((ttl / 4).clamp(every, Duration::from_secs(60)));
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = expiry.tick() => {
                let expired = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .expired(ttl);
                for (key, marker) in expired {
                    let removed = if marker {
                        conversations.records().drop_marker(&key).await
                    } else {
                        conversations.records().expire(&key, ttl).await
                    };
                    match removed {
                        Ok(true) => seen
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .forget(&key),
                        Ok(false) => {}
                        Err(err) => tracing::warn!(conversation = %key, error = %err, "cannot remove an expired conversation"),
                    }
                }
            }
            _ = tick.tick() => {
                let keys: Vec<String> = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .running
                    .iter()
                    .cloned()
                    .collect();
                sweep(&conversations, &keys).await;
            }
            () = stop.cancelled() => break,
        }
    }
    watching.abort();
}

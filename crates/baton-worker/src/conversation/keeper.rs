//! The router's keeper: it settles turns that ended, starts the messages
//! queued behind them, and sends again a turn whose starter crashed before
//! its task was durable.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv;
use baton_proto::Conversation;
use futures::StreamExt;

use super::{ConversationError, Conversations, SILENT};

impl Conversations {
    /// Settles each of the conversations under `keys` whose running turn
    /// ended, and sends again a turn that shows no event long after it
    /// started. Returns how many turns it started or sent again.
    pub(super) async fn sweep(&self, keys: &[String]) -> usize {
        let mut moved = 0;
        for key in keys {
            match self.keep_one(key).await {
                Ok(n) => moved += n,
                Err(err) => {
                    tracing::warn!(conversation = %key, error = %err, "cannot settle a conversation")
                }
            }
        }
        moved
    }

    /// Follows the bucket into `running`: the keys of the conversations
    /// with a running turn, as their records are written. A lost watch is
    /// started again, from each key's last record.
    async fn follow(&self, running: Arc<Mutex<BTreeSet<String>>>) {
        loop {
            // The records only, not the turns listed beside them.
            match self.store.watch_with_history("c.>").await {
                Ok(mut watch) => {
                    while let Some(Ok(entry)) = watch.next().await {
                        let runs = entry.operation == kv::Operation::Put
                            && rmp_serde::from_slice::<Conversation>(&entry.value)
                                .is_ok_and(|record| record.running.is_some());
                        let mut running = running
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        if runs {
                            running.insert(entry.key);
                        } else {
                            running.remove(&entry.key);
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot watch the conversations"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// [`Conversations::sweep`] for one record.
    pub(super) async fn keep_one(&self, key: &str) -> Result<usize, ConversationError> {
        loop {
            let Some((mut record, revision)) = self.read(key).await? else {
                return Ok(0);
            };
            let Some(running) = record.running.clone() else {
                return Ok(0);
            };
            let (started, end) = self.settle(&mut record).await?;
            if !started && record.running.as_ref() == Some(&running) {
                // Still running: its task is sent again only when its
                // starter stopped before noting it was sent, a while ago.
                let quiet = baton_proto::now_ms().saturating_sub(record.updated_at);
                let silent = u64::try_from(SILENT.as_millis()).unwrap_or(u64::MAX);
                if running.sent || quiet < silent {
                    return Ok(0);
                }
                tracing::warn!(conversation = %record.id, turn = record.turns, "a turn's task may not have been sent: sending it again");
                self.start(&record, record.turns, None).await?;
                self.mark_sent(key, record.turns).await?;
                return Ok(1);
            }
            if self.swap(key, &record, revision).await? {
                if started {
                    self.start(&record, record.turns, end.as_ref()).await?;
                    self.mark_sent(key, record.turns).await?;
                }
                return Ok(1);
            }
        }
    }
}

/// Settles conversations every `every` until `stop` is cancelled (the
/// router runs it): those with a running turn, which it learns by watching
/// the bucket, so a tick costs what runs, not every conversation kept.
pub async fn keep(
    conversations: Conversations,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let running = Arc::new(Mutex::new(BTreeSet::new()));
    let watcher = conversations.clone();
    let watching = tokio::spawn({
        let running = running.clone();
        async move { watcher.follow(running).await }
    });
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let keys: Vec<String> = running
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .iter()
                    .cloned()
                    .collect();
                conversations.sweep(&keys).await;
            }
            () = stop.cancelled() => break,
        }
    }
    watching.abort();
}

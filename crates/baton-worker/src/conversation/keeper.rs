//! The router's keeper: it settles turns that ended, starts the messages
//! queued behind them, and sends again a turn whose starter crashed before
//! its task was durable.

use std::time::Duration;

use futures::StreamExt;

use super::{ConversationError, Conversations, SILENT};

impl Conversations {
    /// Settles every conversation whose running turn ended, and sends again
    /// a turn that shows no event long after it started. Returns how many
    /// turns it started or sent again.
    ///
    /// # Errors
    ///
    /// When the bucket cannot be listed.
    pub async fn sweep(&self) -> Result<usize, ConversationError> {
        let mut keys =
            self.store.keys().await.map_err(|err| {
                ConversationError::store(format!("cannot list conversations: {err}"))
            })?;
        let mut moved = 0;
        while let Some(key) = keys.next().await {
            let Ok(key) = key else { continue };
            match self.keep_one(&key).await {
                Ok(n) => moved += n,
                Err(err) => {
                    tracing::warn!(conversation = %key, error = %err, "cannot settle a conversation")
                }
            }
        }
        Ok(moved)
    }

    /// [`Conversations::sweep`] for one record.
    async fn keep_one(&self, key: &str) -> Result<usize, ConversationError> {
        loop {
            let Some((mut record, revision)) = self.read(key).await? else {
                return Ok(0);
            };
            let Some(running) = record.running.clone() else {
                return Ok(0);
            };
            let started = self.settle(&mut record).await?;
            if started.is_empty() && record.running.as_ref() == Some(&running) {
                // Still running: sent again if nothing was ever heard of it.
                let quiet = baton_proto::now_ms().saturating_sub(record.updated_at);
                if quiet < u64::try_from(SILENT.as_millis()).unwrap_or(u64::MAX) {
                    return Ok(0);
                }
                let subjects = self.client.subjects();
                let last = crate::nats::ending::last_event(
                    self.client.jetstream(),
                    subjects,
                    running.session,
                )
                .await
                .map_err(|err| ConversationError::store(err.to_string()))?;
                if last.is_some() {
                    return Ok(0);
                }
                tracing::warn!(conversation = %record.id, turn = record.turns, "a turn shows no event: sending its task again");
                self.start(&record, record.turns).await?;
                return Ok(1);
            }
            if self.swap(key, &record, revision).await? {
                for turn in &started {
                    self.start(&record, *turn).await?;
                }
                return Ok(started.len().max(1));
            }
        }
    }
}

/// Settles conversations every `every` until `stop` is cancelled (the
/// router runs it).
pub async fn keep(
    conversations: Conversations,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Err(err) = conversations.sweep().await {
                    tracing::warn!(error = %err, "cannot sweep the conversations");
                }
            }
            () = stop.cancelled() => return,
        }
    }
}

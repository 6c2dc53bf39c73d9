//! Idle conversations expire: the router's keeper removes a conversation
//! nothing has happened in for its time to live (30 days unless the router
//! is told otherwise), as deleting does, and then its marker too, so the id
//! may start a new conversation. A deleted conversation's marker goes the
//! same time after the delete, with whatever a delete that stopped short
//! left beside it.

use std::time::Duration;

use super::Records;
use crate::error::{Error, ErrorKind};

impl Records {
    /// Removes the conversation at `key` when nothing runs or waits in it
    /// and its record has not changed for `ttl`: its turns' events, listed
    /// turns, transcript and record, marker included. Returns whether it
    /// expired.
    ///
    /// # Errors
    ///
    /// When JetStream refuses a step (the next sweep tries again).
    pub async fn expire(&self, key: &str, ttl: Duration) -> Result<bool, Error> {
        let (record, revision) = match self.read(key).await {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(false),
            // Deleted meanwhile (by a delete, or another router expiring
            // it): its marker goes when it is old enough.
            Err(err) if err.kind() == ErrorKind::Deleted => return Ok(false),
            Err(err) => return Err(err),
        };
        let idle = baton_proto::now_ms().saturating_sub(record.updated_at);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if record.running.is_some() || !record.queue.is_empty() || idle < ttl_ms {
            return Ok(false);
        }
        self.remove(key, &record, revision).await?;
        self.purge_subjects(key).await?;
        tracing::info!(
            conversation = %record.id,
            turns = record.turns,
            idle_secs = idle / 1000,
            "conversation expired: removed with its transcript"
        );
        Ok(true)
    }

    /// Removes a deleted conversation's marker, and whatever a delete that
    /// stopped short left beside it; `false` when the key holds no marker
    /// (any more).
    ///
    /// # Errors
    ///
    /// When JetStream refuses a purge.
    pub async fn drop_marker(&self, key: &str) -> Result<bool, Error> {
        // Only a marker: while it stands, no conversation of that id starts,
        // so what is cleared beside it is the deleted one's.
        match self.read(key).await {
            Err(err) if err.kind() == ErrorKind::Deleted => {}
            Ok(_) => return Ok(false),
            Err(err) => return Err(err),
        }
        self.clear(key).await?;
        self.purge_subjects(key).await?;
        Ok(true)
    }
}

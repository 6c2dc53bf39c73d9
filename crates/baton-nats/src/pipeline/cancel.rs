//! Cancelled sessions. A cancel is a key in the `BATON_CANCELLED` bucket
//! (the session id) and the session's terminal `failed` event, reason
//! `cancelled`. Every worker watches the bucket into memory: it drops the
//! session's messages unrun, and a run in progress is stopped (its future
//! dropped, an exec program killed). Outputs that were still being decided
//! are discarded, so nothing of the session moves on.
//!
//! The watch is asynchronous: a worker learns of a cancel within the time
//! the key takes to reach it (a round trip, normally). A hop that ended in
//! that window may still hand the task on; its successor drops it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use baton_proto::footprint::Footprint;
use baton_proto::{AgentName, Event, EventType, Reason, Subjects, derive_id_labelled};
use uuid::Uuid;

use crate::error::Error;
use crate::nats::watched::{self, Seen};

/// The id of a session's `cancelled` event: the same for every canceller,
/// so a session ends once however often it is cancelled.
#[must_use]
pub fn cancel_event_id(session: Uuid) -> Uuid {
    derive_id_labelled(session, "cancelled", 0)
}

/// The `failed` event that ends a cancelled session.
#[must_use]
pub fn cancelled_event(session: Uuid, detail: &str, last: Option<&Event>) -> Event {
    let mut event = Event::new(cancel_event_id(session), session, EventType::Failed);
    event.agent = Some(AgentName::from_static("cancel"));
    event.reason = Some(Reason::Cancelled);
    event.detail = Some(detail.to_owned());
    if let Some(last) = last {
        event.path.clone_from(&last.path);
        event.replay_of = last.replay_of;
    }
    event
}

/// Opens the bucket of cancelled sessions, creating it if it is missing.
pub async fn bucket(
    jetstream: &jetstream::Context,
    subjects: &Subjects,
    replicas: usize,
) -> Result<kv::Store, Error> {
    crate::state::Bucket::Cancelled
        .open(jetstream, subjects, replicas)
        .await
}

/// The cancelled sessions a worker knows of, kept current by [`watch`].
#[derive(Debug)]
pub struct Cancelled {
    sessions: Mutex<HashSet<Uuid>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Cancelled {
    fn default() -> Self {
        Self {
            sessions: Mutex::default(),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

impl Cancelled {
    /// Whether `session` was cancelled.
    pub fn contains(&self, session: Uuid) -> bool {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&session)
    }

    fn insert(&self, session: Uuid) {
        let added = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session);
        if added {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Resolves once `session` is cancelled; never, if it is not.
    pub async fn wait(&self, session: Uuid) {
        let mut changed = self.changed.subscribe();
        loop {
            if self.contains(session) {
                return;
            }
            if changed.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// Follows the bucket of cancelled sessions into `cancelled`. Returns once
/// the stored cancels are read (or after `ready_within`, with a warning),
/// and keeps following in the returned task, reopening the watch if it ends.
pub async fn watch(
    jetstream: jetstream::Context,
    subjects: Subjects,
    replicas: usize,
    cancelled: Arc<Cancelled>,
    ready_within: Duration,
) -> tokio::task::JoinHandle<()> {
    let name = subjects.cancelled_bucket();
    let open = move || {
        let (jetstream, subjects) = (jetstream.clone(), subjects.clone());
        async move { bucket(&jetstream, &subjects, replicas).await }
    };
    let seen = move |seen: Seen<'_>| {
        if let Seen::Entry(entry) = seen
            && entry.operation == kv::Operation::Put
            && let Ok(session) = entry.key.parse::<Uuid>()
        {
            cancelled.insert(session);
        }
    };
    watched::watch("cancelled sessions", name, open, seen, ready_within).await
}

/// What following the cancelled sessions uses; with `write`, cancelling too.
#[must_use]
pub fn footprint(subjects: &Subjects, write: bool) -> Footprint {
    let bucket = subjects.cancelled_bucket();
    let watch = Footprint::kv_watcher(&bucket);
    if write {
        watch.publishes([format!("$KV.{bucket}.>")])
    } else {
        watch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_wakes_on_its_session_only() {
        let cancelled = Arc::new(Cancelled::default());
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let waiting = {
            let cancelled = cancelled.clone();
            tokio::spawn(async move { cancelled.wait(a).await })
        };
        cancelled.insert(b);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "woke for another session");
        cancelled.insert(a);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woke")
            .expect("joined");
        assert!(cancelled.contains(a) && cancelled.contains(b));
    }

    #[test]
    fn the_cancel_event_id_is_the_same_for_every_canceller() {
        let session = Uuid::new_v4();
        assert_eq!(cancel_event_id(session), cancel_event_id(session));
        assert_ne!(cancel_event_id(session), cancel_event_id(Uuid::new_v4()));
    }
}

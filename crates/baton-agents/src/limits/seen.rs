//! The shared schedules as this process last saw them, and the
//! compare-and-set that changes one. The bucket's watch keeps the copies
//! current, and the process's own writes are noted as they succeed. A
//! change starts from the copy; the revision check proves it current, and
//! only a conflict (another process wrote since) makes it read the entry.

use std::time::Duration;

use async_nats::jetstream::kv;
use baton_nats::{Error, ErrorKind};

use super::schedule::Schedule;
use super::{ATTEMPTS, now_us};

/// A schedule's entry as last seen: its value (`None` once deleted) and
/// revision.
#[derive(Clone)]
pub(super) struct Known {
    pub(super) value: Option<bytes::Bytes>,
    pub(super) revision: u64,
}

/// The schedules as the bucket's watch (and this process's own writes)
/// last showed them, by key; empty while the watch is not current.
#[derive(Clone, Default)]
pub(super) struct Seen {
    known: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, Known>>>,
    /// Wakes the callers waiting for a schedule to change.
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Seen {
    /// Waits until some schedule changes.
    pub(super) async fn changed(&self) {
        self.changed.notified().await;
    }

    pub(super) fn get(&self, key: &str) -> Option<Known> {
        self.lock().get(key).cloned()
    }

    /// Keeps `known` for `key` unless a later revision is kept.
    pub(super) fn note(&self, key: &str, known: Known) {
        let mut seen = self.lock();
        if seen
            .get(key)
            .is_none_or(|kept| kept.revision < known.revision)
        {
            seen.insert(key.to_owned(), known);
            drop(seen);
            self.changed.notify_waiters();
        }
    }

    fn forget(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Known>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follows `store` into memory, from its stored entries on.
    pub(super) async fn watch(
        &self,
        store: kv::Store,
        bucket: String,
    ) -> tokio::task::JoinHandle<()> {
        let seen = self.clone();
        baton_nats::watched::watch(
            "shared rate limits",
            bucket,
            move || {
                let store = store.clone();
                async move { Ok(store) }
            },
            move |event| match event {
                baton_nats::watched::Seen::Entry(entry) => seen.note(
                    &entry.key,
                    Known {
                        value: (entry.operation == kv::Operation::Put).then(|| entry.value.clone()),
                        revision: entry.revision,
                    },
                ),
                baton_nats::watched::Seen::Lost => seen.forget(),
                baton_nats::watched::Seen::Current => {}
            },
            Duration::from_secs(2),
        )
        .await
    }
}

/// One schedule's entry in the bucket, and the copies seen of it.
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) store: kv::Store,
    pub(super) key: String,
    pub(super) seen: Seen,
}

impl Entry {
    /// Changes the schedule with `change` and writes it back if nobody
    /// wrote it meanwhile (and it changed); tries again otherwise. The
    /// first try starts from the schedule as last seen; a try that fails,
    /// or that would change nothing, reads it.
    pub(super) async fn update(
        &self,
        mut change: impl FnMut(&mut Schedule, u64),
    ) -> Result<(), baton_nats::Error> {
        for attempt in 0..ATTEMPTS {
            let remembered = if attempt == 0 {
                self.seen.get(&self.key)
            } else {
                None
            };
            let from_memory = remembered.is_some();
            let (value, revision) = match remembered {
                Some(known) => (known.value, Some(known.revision)),
                None => self.read().await?,
            };
            let mut schedule: Schedule = value
                .as_deref()
                .map(|value| rmp_serde::from_slice(value).unwrap_or_default())
                .unwrap_or_default();
            change(&mut schedule, now_us());
            let bytes = bytes::Bytes::from(rmp_serde::to_vec_named(&schedule).map_err(|err| {
                Error::new(
                    ErrorKind::Encode,
                    format!("cannot encode the rate limit: {err}"),
                )
            })?);
            // Unchanged (a turn still past the horizon): nothing to write,
            // once a read confirms it.
            if value.as_ref() == Some(&bytes) {
                if from_memory {
                    continue;
                }
                return Ok(());
            }
            let written = match revision {
                Some(revision) => self
                    .store
                    .update(&self.key, bytes.clone(), revision)
                    .await
                    .map_err(|err| baton_nats::error_chain(&err)),
                None => self
                    .store
                    .create(&self.key, bytes.clone())
                    .await
                    .map_err(|err| baton_nats::error_chain(&err)),
            };
            match written {
                Ok(revision) => {
                    let value = Some(bytes);
                    self.seen.note(&self.key, Known { value, revision });
                    return Ok(());
                }
                Err(err) if from_memory => {
                    tracing::debug!(error = %err, "the rate limit changed since it was seen; reading it");
                }
                Err(err) => {
                    tracing::debug!(attempt, error = %err, "the rate limit changed meanwhile; again");
                    // A short random pause, growing with the attempts (to ~6 ms).
                    let jitter = fastrand::u64(0..=100u64 << attempt.min(6));
                    tokio::time::sleep(Duration::from_micros(jitter)).await;
                }
            }
        }
        Err(Error::new(
            ErrorKind::JetStream,
            format!(
                "the rate limit {} stayed contended for {ATTEMPTS} attempts",
                self.key
            ),
        ))
    }

    /// The schedule's stored value (`None` when deleted or missing) and
    /// revision (`None` when missing).
    async fn read(&self) -> Result<(Option<bytes::Bytes>, Option<u64>), Error> {
        let entry = self.store.entry(&self.key).await.map_err(|err| {
            Error::new(
                ErrorKind::JetStream,
                format!("cannot read the rate limit {}: {err}", self.key),
            )
        })?;
        Ok(match entry {
            Some(entry) if entry.operation == kv::Operation::Put => {
                (Some(entry.value), Some(entry.revision))
            }
            Some(entry) => (None, Some(entry.revision)),
            None => (None, None),
        })
    }
}

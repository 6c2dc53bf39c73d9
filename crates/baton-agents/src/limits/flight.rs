//! The calls this process has in flight under a shared limit, and how the
//! others hear of them. A turn carries a [`Flight`]: while it lives the
//! call counts in flight, and when it ends (answered, refused, or never
//! made) the count drops at once for this process. A task of the limiter
//! then writes the count, and the answers since, to the shared schedule:
//! several ends make one write, and a process with calls in flight says so
//! again every few seconds, so its count never lapses while it lives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::seen::Entry;

/// How often a process with calls in flight says so again.
const AGAIN: Duration = Duration::from_secs(10);

/// This process's calls in flight under one limit.
#[derive(Debug, Default)]
pub(crate) struct Flying {
    /// The process's name in the schedule.
    pub(crate) id: String,
    /// Calls in flight.
    count: AtomicU32,
    /// Calls answered since the last write.
    answered: AtomicU32,
    /// Wakes the writer.
    poke: Notify,
    /// Wakes the callers waiting for the window.
    released: Notify,
}

impl Flying {
    /// The flying calls of a new process.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            id: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            ..Self::default()
        })
    }

    /// Calls in flight now.
    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::SeqCst)
    }

    /// One more call in flight, until the returned flight ends.
    pub(crate) fn depart(self: &Arc<Self>) -> Flight {
        self.count.fetch_add(1, Ordering::SeqCst);
        Flight {
            flying: self.clone(),
            answered: false,
        }
    }

    /// Waits until one of this process's calls ends.
    pub(crate) async fn released(&self) {
        self.released.notified().await;
    }

    /// Writes the count and the answers to `entry` whenever they change,
    /// and every [`AGAIN`] while calls are in flight; runs until aborted.
    pub(crate) async fn write(self: Arc<Self>, entry: Entry) {
        let mut written = 0;
        loop {
            let _ = tokio::time::timeout(AGAIN, self.poke.notified()).await;
            let answered = self.answered.swap(0, Ordering::SeqCst);
            let count = self.count();
            if answered == 0 && count == 0 && written == 0 {
                continue;
            }
            let id = &self.id;
            let result = entry
                .update(|schedule, now| schedule.flew(id, count, answered, now))
                .await;
            match result {
                Ok(()) => written = count,
                Err(err) => {
                    self.answered.fetch_add(answered, Ordering::SeqCst);
                    tracing::warn!(error = %err, "cannot share the calls in flight");
                }
            }
        }
    }
}

/// One call in flight: it counts until dropped.
#[derive(Debug)]
pub(crate) struct Flight {
    flying: Arc<Flying>,
    answered: bool,
}

impl Flight {
    /// The call was answered: its end widens the window.
    pub(crate) fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.flying.count.fetch_sub(1, Ordering::SeqCst);
        if self.answered {
            self.flying.answered.fetch_add(1, Ordering::SeqCst);
        }
        self.flying.poke.notify_one();
        self.flying.released.notify_waiters();
    }
}

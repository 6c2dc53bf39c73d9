//! What a run of the chain records: each hop's latency, the tasks done,
//! and the closed-loop window (a task is submitted only when one of the
//! window's in-flight tasks has finished).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{Notify, Semaphore};

use super::now_ns;

/// Hop latencies and completions of one run, and the closed-loop window:
/// a task is submitted only when one of `window` in-flight tasks has finished.
pub(super) struct Recorder {
    pub(super) hops: Mutex<Vec<u64>>,
    done: AtomicU64,
    notify: Notify,
    window: Arc<Semaphore>,
}

impl Recorder {
    pub(super) fn new(window: usize) -> Self {
        Self {
            hops: Mutex::default(),
            done: AtomicU64::new(0),
            notify: Notify::new(),
            window: Arc::new(Semaphore::new(window)),
        }
    }
}

impl Recorder {
    pub(super) fn hop(&self, sent_ns: u64) {
        let latency = now_ns().saturating_sub(sent_ns);
        if let Ok(mut hops) = self.hops.lock() {
            hops.push(latency);
        }
    }

    pub(super) fn finish(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
        self.window.add_permits(1);
        self.notify.notify_one();
    }

    /// Waits for room in the window; the permit is returned by `finish`.
    pub(super) async fn slot(&self) {
        if let Ok(permit) = self.window.acquire().await {
            permit.forget();
        }
    }

    pub(super) async fn wait_for(&self, count: u64, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.done.load(Ordering::Relaxed) < count {
            tokio::time::timeout_at(deadline, self.notify.notified())
                .await
                .with_context(|| {
                    format!(
                        "only {} of {count} tasks finished in {timeout:?}",
                        self.done.load(Ordering::Relaxed)
                    )
                })?;
        }
        Ok(())
    }

    pub(super) fn reset(&self) {
        if let Ok(mut hops) = self.hops.lock() {
            hops.clear();
        }
        self.done.store(0, Ordering::Relaxed);
    }
}

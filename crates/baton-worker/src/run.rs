//! Step 3 of the worker loop: run the agent under its timeout, telling the
//! server the work is alive so `ack_wait` never expires under a live worker.

use std::future::Future;
use std::time::Duration;

use baton_proto::now_ms;

use baton_author::{AgentError, Outcome};
use baton_nats::pipeline::delivery::Delivery;

/// How long a run may take, and how often its message gets a progress ack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// How long one run of the agent may take.
    pub(crate) timeout: Duration,
    /// How often a running agent's message gets a progress ack.
    pub(crate) every: Duration,
}

/// Runs `work` (a call of the agent) under the agent's timeout and the
/// session's deadline (unix ms), sending `+WPI` every `progress_every`. The
/// work is dropped when either passes: an exec program is killed with it.
/// A timeout is a retryable failure; after the deadline the caller ends the
/// session with `deadline_exceeded`.
pub(crate) async fn with_progress(
    pace: Pace,
    delivery: &Delivery<'_>,
    work: impl Future<Output = Result<Outcome, AgentError>>,
    what: &str,
    deadline: Option<u64>,
) -> Result<Outcome, AgentError> {
    let timeout = pace.timeout;
    // One ms past the deadline, so the deadline has passed when the run is dropped.
    let left =
        deadline.map(|deadline| Duration::from_millis(deadline.saturating_sub(now_ms()) + 1));
    let limit = left.map_or(timeout, |left| left.min(timeout));
    let work = tokio::time::timeout(limit, work);
    keep_alive(pace.every, delivery, work)
        .await
        .unwrap_or_else(|_| {
            if limit < timeout {
                Err(AgentError::fatal(format!(
                    "{what} was cancelled at the session's deadline"
                )))
            } else {
                Err(AgentError::retryable(format!(
                    "{what} timed out after {timeout:?}"
                )))
            }
        })
}

/// Runs `work`, sending `+WPI` every `progress_every` so the message is not
/// redelivered while it lasts.
pub(crate) async fn keep_alive<T>(
    every: Duration,
    delivery: &Delivery<'_>,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    // Start one period out: an interval's "immediate" first tick still waits
    // for the timer wheel (up to 1 ms), which would delay every message.
    let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            result = &mut work => return result,
            _ = progress.tick() => delivery.progress().await,
        }
    }
}

//! Step 3 of the worker loop: run the agent under its timeout, telling the
//! server the work is alive so `ack_wait` never expires under a live worker.

use std::future::Future;

use crate::delivery::Delivery;
use crate::outcome::{AgentError, Outcome};
use crate::runtime::Runtime;

/// Runs `work` (a call of the agent) under the agent's timeout, sending
/// `+WPI` every `progress_every`. A timeout is a retryable failure.
pub(crate) async fn with_progress(
    rt: &Runtime,
    delivery: &Delivery<'_>,
    work: impl Future<Output = Result<Outcome, AgentError>>,
    what: &str,
) -> Result<Outcome, AgentError> {
    let timeout = rt.timeout;
    let work = tokio::time::timeout(timeout, work);
    keep_alive(rt, delivery, work).await.unwrap_or_else(|_| {
        Err(AgentError::retryable(format!(
            "{what} timed out after {timeout:?}"
        )))
    })
}

/// Runs `work`, sending `+WPI` every `progress_every` so the message is not
/// redelivered while it lasts.
pub(crate) async fn keep_alive<T>(
    rt: &Runtime,
    delivery: &Delivery<'_>,
    work: impl Future<Output = T>,
) -> T {
    tokio::pin!(work);
    // Start one period out: an interval's "immediate" first tick still waits
    // for the timer wheel (up to 1 ms), which would delay every message.
    let mut progress = tokio::time::interval_at(
        tokio::time::Instant::now() + rt.progress_every,
        rt.progress_every,
    );
    loop {
        tokio::select! {
            result = &mut work => return result,
            _ = progress.tick() => delivery.progress().await,
        }
    }
}

//! What an agent reports while its hop runs: a `tool_called` event for each
//! tool call, stored at the `full` event level and live at `lean`, best
//! effort (a report that cannot be sent is logged, and the hop goes on).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use baton_proto::Usage;

/// One tool call, as reported.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// The tool's name, as the model called it.
    pub tool: &'a str,
    /// The call's key, unique within the session (its idempotency key): a
    /// redelivered hop that reports the same call again reports it once.
    pub call: &'a str,
    /// `ok`, `error` (the tool said the call failed) or `failed` (no answer).
    pub outcome: &'a str,
    /// How long it took.
    pub took: Duration,
}

/// Where a running hop reports its progress. [`Progress::default`] reports
/// nothing (an agent run outside a worker).
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn Report>>);

/// Where one hop's reports go; the worker loop provides it.
pub(crate) trait Report: Send + Sync {
    /// Adds `usage` to what the hop spent.
    fn spent(&self, usage: Usage);
    /// What the hop spent so far.
    fn spending(&self) -> Usage;
    /// Reports `call`, best effort.
    fn tool_called<'a>(
        &'a self,
        call: ToolCall<'a>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Progress").field(&self.0.is_some()).finish()
    }
}

impl Progress {
    /// Progress that goes to `report`.
    pub(crate) fn to(report: Arc<dyn Report>) -> Self {
        Self(Some(report))
    }

    /// Adds what a model call spent to the hop's usage. It travels on with
    /// the session, in every envelope and terminal event after this hop.
    pub fn spent(&self, usage: Usage) {
        if let Some(report) = &self.0 {
            report.spent(usage);
        }
    }

    /// What the hop spent so far (nothing for a run outside a worker).
    #[must_use]
    pub fn spending(&self) -> Usage {
        self.0
            .as_ref()
            .map(|report| report.spending())
            .unwrap_or_default()
    }

    /// Reports `call` as a `tool_called` event of the session.
    pub async fn tool_called(&self, call: ToolCall<'_>) {
        if let Some(report) = &self.0 {
            report.tool_called(call).await;
        }
    }
}
